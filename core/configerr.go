package core

// ConfigError is a Config that Validate (or Engine.Join) refuses: the field,
// the rule it breaks, the value given and, for a number or a length, the
// range accepted. Hosts name the field in their own words from Field and
// Rule (electhost maps them to its flags); Error is the core's own sentence,
// in Config's wire names.
type ConfigError struct {
	// Field is the wire name of the field refused: "heartbeat_ms",
	// "members", "id", "member_keys", ...
	Field string
	// Rule names the rule broken, one name per rule whichever field it
	// checks: "heartbeat-range", "members-self", "name-byte", ...
	Rule string
	// Value is the value refused, as text: a number, an id, a mode ("" when
	// the field is missing).
	Value string
	// Min and Max bound a number (or a count or length) in the field's
	// unit; for "name-byte" Min is the offending byte's index.
	Min, Max int64
	msg      string
}

func (e *ConfigError) Error() string { return e.msg }

// configErr builds the ConfigError of field breaking rule. Its arguments
// are literals at every call, so a test can list every rule (electhost's
// must map each to a flag).
func configErr(field, rule, value string, min, max int64, msg string) error {
	return &ConfigError{Field: field, Rule: rule, Value: value, Min: min, Max: max, msg: msg}
}
