package host

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/statestore"
)

// StateName is the name under which an Agent stores the persisted
// core.GroupState (msgp) of agent id in group: "<id>=<group>", with '/'
// written as "%2F" (state names cannot contain path separators).
func StateName(id, group string) string {
	return stateEscaper.Replace(id) + "=" + stateEscaper.Replace(group)
}

// stateEscaper is built once: building it for every name (every save of
// every group) cost 5 % of an agent's CPU in 1,000 groups.
var stateEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// Store keeps an agent's persisted election state, one blob per name
// (StateName): statestore.Store on disk, statestore.Mem in memory, or a
// store of your own. Save must be durable when it returns nil (a member
// that forgets its vote can vote twice in one term); Load of a name never
// saved returns an error matching statestore.ErrNotFound.
type Store interface {
	Save(name string, data []byte) error
	Load(name string) ([]byte, error)
}

// noStore reports whether s holds no store: nil, or a nil pointer such as
// an unset *statestore.Store (which would otherwise fail on first use).
func noStore(s Store) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// ErrStateUnusable wraps a persisted state that exists but cannot be used
// (corrupt, missing although it was saved before, or someone else's).
var ErrStateUnusable = errors.New("persisted election state unusable")

// loadState returns the persisted state of (id, group): the zero state if it
// was never saved, an error wrapping ErrStateUnusable if it cannot be trusted.
// It never falls back to term 0 for a state that existed: a member that
// forgets its term and vote can vote twice in one term.
func loadState(s Store, id, group string) (core.GroupState, error) {
	name := StateName(id, group)
	b, err := s.Load(name)
	if errors.Is(err, statestore.ErrNotFound) {
		return core.GroupState{}, nil
	}
	hint := "; refusing to start from term 0 (this member could vote twice in one term): restore the state, or delete it on purpose (statestore.Store.Delete) to reset the member"
	if err != nil {
		return core.GroupState{}, fmt.Errorf("host: group %q: %w: %w%s", group, ErrStateUnusable, err, hint)
	}
	var st core.GroupState
	if rest, err := abi.UnmarshalState(b, &st); err != nil || len(rest) != 0 {
		return core.GroupState{}, fmt.Errorf("host: group %q: %w: state %q does not decode (%v)%s", group, ErrStateUnusable, name, err, hint)
	}
	if st.Group != group {
		return core.GroupState{}, fmt.Errorf("host: group %q: %w: state %q belongs to group %q%s", group, ErrStateUnusable, name, st.Group, hint)
	}
	return st, nil
}
