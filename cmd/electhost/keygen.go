package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/electcore/electcore/core"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Key files (see README.md, "Authentication"):
//
//   - an ed25519 private key is a PEM "PRIVATE KEY" block (PKCS #8), the
//     format of `openssl genpkey -algorithm ed25519`; electhost keygen writes
//     one with mode 0600;
//   - an HMAC group key is one line of base64 (standard or URL alphabet) of
//     at least 16 random bytes, e.g. `openssl rand -base64 32`, or
//     `electhost keygen --hmac`;
//   - a members file maps ids to ed25519 public keys, one "id base64-key"
//     per line (# comments and blank lines allowed), or a JSON object
//     {"id": "base64-key", ...}; `electhost keygen --id ID` prints the line.
//
// A private key file (either kind) that its group or others may read or
// write is refused, as ssh refuses one.

func newKeygenCmd() *cobra.Command {
	var out, id string
	var hmacKey, force bool
	c := &cobra.Command{
		Use:   "keygen --out FILE [--id ID] [--hmac] [--force]",
		Short: "Write a private key for authenticated elections and print its public key",
		Long: `keygen writes a new ed25519 private key (PEM, PKCS #8) to --out with mode
0600 and prints its public key in base64: with --id, as the "ID KEY" line of
a members file (electhost run --members-file). With --hmac it writes a
random 32-byte group key (base64) instead, to be shared by every member
(electhost run --auth hmac --key FILE).

It refuses to overwrite an existing file unless --force is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageErrorf("--out is required")
			}
			if id != "" {
				if err := (core.Config{ID: id, Group: "g", Mode: core.ModeBully}).Validate(); err != nil {
					return nameInWords(err, "--id")
				}
			}
			var data []byte
			var pub ed25519.PublicKey
			if hmacKey {
				k := make([]byte, 32)
				rand.Read(k)
				data = []byte(base64.StdEncoding.EncodeToString(k) + "\n")
			} else {
				p, priv, err := ed25519.GenerateKey(rand.Reader)
				if err != nil {
					return err
				}
				der, err := x509.MarshalPKCS8PrivateKey(priv)
				if err != nil {
					return err
				}
				data, pub = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), p
			}
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(out, flags, 0o600)
			if errors.Is(err, fs.ErrExist) {
				return configErrorf("--out %s exists (use --force to overwrite)", out)
			}
			if err != nil {
				return configErrorf("--out: %v", err)
			}
			if err := f.Chmod(0o600); err != nil { // an existing file under --force
				f.Close()
				return configErrorf("--out: %v", err)
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return configErrorf("--out: %v", err)
			}
			if err := f.Close(); err != nil {
				return configErrorf("--out: %v", err)
			}
			w := cmd.OutOrStdout()
			switch {
			case hmacKey:
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote an HMAC group key to %s: give every member a copy (mode 0600) over a secure channel\n", out)
			case id != "":
				fmt.Fprintf(w, "%s %s\n", id, base64.StdEncoding.EncodeToString(pub))
			default:
				fmt.Fprintln(w, base64.StdEncoding.EncodeToString(pub))
			}
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "private key file to write (mode 0600)")
	c.Flags().StringVar(&id, "id", "", `print the public key as a members-file line "ID KEY"`)
	c.Flags().BoolVar(&hmacKey, "hmac", false, "write a shared HMAC group key instead of an ed25519 key pair")
	c.Flags().BoolVar(&force, "force", false, "overwrite --out if it exists")
	return c
}

// authFlags are run's authentication flags.
type authFlags struct {
	mode, keyFile, membersFile string
}

func (a *authFlags) register(f *pflag.FlagSet) {
	f.StringVar(&a.mode, "auth", "", "message authentication: off, hmac or ed25519 (default: ed25519 with --members-file, hmac with a base64 --key alone, else off)")
	f.StringVar(&a.keyFile, "key", "", "private key file: ed25519 PEM (electhost keygen) or a base64 HMAC group key; must not be readable by group or others")
	f.StringVar(&a.membersFile, "members-file", "", `ed25519 public keys of the members: "id base64-key" lines or a JSON object; its ids are the --members default`)
}

// apply fills cfg's authentication from the flags (and cfg.Members from the
// members file when --members is not given).
func (a *authFlags) apply(cfg *core.Config) error {
	mode := core.AuthMode(a.mode)
	switch mode {
	case "", core.AuthOff, core.AuthHMAC, core.AuthEd25519:
	default:
		return usageErrorf("--auth %q: want off, hmac or ed25519", a.mode)
	}
	if mode == core.AuthOff {
		if a.keyFile != "" || a.membersFile != "" {
			return usageErrorf("--auth off with --key or --members-file: drop them or choose --auth hmac or ed25519")
		}
		return nil
	}
	if mode == "" && a.keyFile == "" && a.membersFile == "" {
		return nil
	}
	if a.keyFile == "" {
		if a.membersFile != "" { // a missing or bad members file first: it is what the user gave
			if _, _, err := loadMembersFile(a.membersFile); err != nil {
				return err
			}
		}
		return usageErrorf("authentication needs --key (this agent's private key, or the group's HMAC key)")
	}
	key, isEd, err := loadPrivateKey(a.keyFile)
	if err != nil {
		return err
	}
	if mode == "" {
		mode = core.AuthHMAC
		if isEd || a.membersFile != "" {
			mode = core.AuthEd25519
		}
	}
	switch mode {
	case core.AuthHMAC:
		if isEd {
			return configErrorf("--key %s is an ed25519 private key, but --auth hmac needs the group's shared key (electhost keygen --hmac)", a.keyFile)
		}
		if a.membersFile != "" {
			return usageErrorf("--members-file is for --auth ed25519; with hmac every member holds the same --key")
		}
		cfg.Auth, cfg.Key = core.AuthHMAC, key
	case core.AuthEd25519:
		if !isEd {
			return configErrorf("--key %s is not an ed25519 private key (PEM \"PRIVATE KEY\"; electhost keygen writes one)", a.keyFile)
		}
		if a.membersFile == "" {
			return usageErrorf("--auth ed25519 needs --members-file (every member's public key)")
		}
		keys, ids, err := loadMembersFile(a.membersFile)
		if err != nil {
			return err
		}
		cfg.Auth, cfg.Key, cfg.MemberKeys = core.AuthEd25519, key, keys
		if len(cfg.Members) == 0 && cfg.Mode == core.ModeQuorum {
			cfg.Members = ids
		}
	}
	return nil
}

// checkKeyPerm refuses a key file its group or others may access.
func checkKeyPerm(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return configErrorf("--key: %v", err)
	}
	if !st.Mode().IsRegular() {
		return configErrorf("--key %s: not a regular file", path)
	}
	if p := st.Mode().Perm(); p&0o077 != 0 {
		return configErrorf("--key %s: permissions %04o let group or others read or write the private key; run: chmod 600 %s", path, p, path)
	}
	return nil
}

// loadPrivateKey reads an ed25519 PEM private key (isEd) or a base64 HMAC key.
func loadPrivateKey(path string) (key []byte, isEd bool, err error) {
	if err := checkKeyPerm(path); err != nil {
		return nil, false, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, configErrorf("--key: %v", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "PRIVATE KEY" {
			return nil, false, configErrorf("--key %s: PEM block %q, want \"PRIVATE KEY\" (ed25519, PKCS #8)", path, blk.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, false, configErrorf("--key %s: %v", path, err)
		}
		ed, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, false, configErrorf("--key %s: a %T, want an ed25519 key", path, k)
		}
		return []byte(ed), true, nil
	}
	k, err := decodeB64(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, configErrorf("--key %s: neither a PEM private key nor base64: %v", path, err)
	}
	if len(k) < core.MinHMACKey || len(k) > core.MaxHMACKey {
		return nil, false, configErrorf("--key %s: an HMAC key of %d bytes, want %d..%d", path, len(k), core.MinHMACKey, core.MaxHMACKey)
	}
	return k, false, nil
}

func decodeB64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, err
}

// loadMembersFile reads id → ed25519 public key, as "id key" lines or JSON.
func loadMembersFile(path string) (map[string][]byte, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, configErrorf("--members-file: %v", err)
	}
	raw := map[string]string{}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &raw); err != nil {
			return nil, nil, configErrorf("--members-file %s: %v", path, err)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				return nil, nil, configErrorf("--members-file %s:%d: want \"id base64-public-key\"", path, n)
			}
			if _, dup := raw[f[0]]; dup {
				return nil, nil, configErrorf("--members-file %s:%d: %s listed twice", path, n, f[0])
			}
			raw[f[0]] = f[1]
		}
	}
	if len(raw) == 0 {
		return nil, nil, configErrorf("--members-file %s: no members", path)
	}
	keys := make(map[string][]byte, len(raw))
	for id, s := range raw {
		k, err := decodeB64(s)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, nil, configErrorf("--members-file %s: %s: want a base64 ed25519 public key of %d bytes", path, id, ed25519.PublicKeySize)
		}
		keys[id] = k
	}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return keys, ids, nil
}
