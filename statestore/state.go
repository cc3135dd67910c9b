package statestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// State store errors.
var (
	// ErrNotFound: Load of a name that was never saved (a fresh start is
	// safe).
	ErrNotFound = errors.New("statestore: not found")
	// ErrClosed: the store was used after Close.
	ErrClosed = errors.New("statestore: closed")
	// ErrCorrupt: a state file (or the manifest) failed its header or checksum check.
	ErrCorrupt = errors.New("statestore: state corrupt")
	// ErrMissing: the store recorded that a state with this name was saved,
	// but its file is gone. Never treat this as a fresh start: a node that
	// forgets its term and vote can vote twice.
	ErrMissing = errors.New("statestore: state missing (it existed before)")
	// ErrInvalidName: a state name that is empty, "." or "..", or contains a
	// path separator or NUL.
	ErrInvalidName = errors.New("statestore: invalid state name")
	// ErrLocked: another process holds the state directory.
	ErrLocked = errors.New("statestore: state directory locked by another process")
)

// On-disk format of a state file (and of the manifest), all little endian:
//
//	magic   [4]byte "ECST"
//	version uint16  (1)
//	flags   uint16  (0)
//	length  uint64  payload length
//	crc     uint32  CRC-32C (Castagnoli) of the 16 bytes above and the payload
//	payload [length]byte
//
// Anything else (short file, trailing bytes, wrong magic/version, bad CRC) is ErrCorrupt.
const (
	stateMagic      = "ECST"
	stateVersion    = 1
	stateHeaderSize = 20
	stateSuffix     = ".state"
	manifestName    = ManifestName
	lockName        = "LOCK.electcore"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeState(payload []byte) []byte {
	buf := make([]byte, stateHeaderSize+len(payload))
	copy(buf, stateMagic)
	binary.LittleEndian.PutUint16(buf[4:], stateVersion)
	binary.LittleEndian.PutUint16(buf[6:], 0)
	binary.LittleEndian.PutUint64(buf[8:], uint64(len(payload)))
	copy(buf[stateHeaderSize:], payload)
	crc := crc32.Update(crc32.Checksum(buf[:16], castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(buf[16:], crc)
	return buf
}

func decodeState(buf []byte) ([]byte, error) {
	if len(buf) < stateHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(buf))
	}
	if string(buf[:4]) != stateMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, buf[:4])
	}
	if v := binary.LittleEndian.Uint16(buf[4:]); v != stateVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", ErrCorrupt, v)
	}
	n := binary.LittleEndian.Uint64(buf[8:])
	if n != uint64(len(buf)-stateHeaderSize) {
		return nil, fmt.Errorf("%w: header says %d payload bytes, file has %d", ErrCorrupt, n, len(buf)-stateHeaderSize)
	}
	payload := buf[stateHeaderSize:]
	crc := crc32.Update(crc32.Checksum(buf[:16], castagnoli), castagnoli, payload)
	if got := binary.LittleEndian.Uint32(buf[16:]); got != crc {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return payload, nil
}

// Store keeps opaque per-name byte blobs (the host stores the encoded
// election state of each group) durably in one directory. Save is atomic:
// after a crash, Load returns either the old or the new bytes. It is safe for
// concurrent use; the directory is locked against other processes while open.
type Store struct {
	dir    string
	logger *slog.Logger

	mu    sync.Mutex
	known map[string]bool // names recorded in the manifest
	// rebuiltCorrupt: Open rebuilt a corrupt manifest (RebuildCorruptManifest).
	rebuiltCorrupt bool
	lock           *os.File
	closed         bool
}

// ManifestName is the file, in a state directory, that lists the names ever
// saved there (so that a lost state is told from a fresh one).
const ManifestName = "MANIFEST.electcore"

// Options configures Open.
type Options struct {
	Logger *slog.Logger // nil: silent
	// RebuildCorruptManifest: a manifest that fails its checks is rebuilt
	// from the state files present (logged), as a missing one is, instead
	// of refusing to open. A state saved before and lost since is then no
	// longer reported as ErrMissing: for an operator's reset only.
	RebuildCorruptManifest bool
}

// Open opens (creating it if needed, mode 0700) a state directory.
// It fails with a clear error if the directory cannot be written, with
// ErrLocked if another process has it open, and with ErrCorrupt if its
// manifest is damaged.
func Open(dir string, opts ...Options) (*Store, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if dir == "" {
		return nil, errors.New("statestore: state directory not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("statestore: cannot create state directory %s: %w", dir, err)
	}
	// Writability check: create, sync and remove a probe file.
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("statestore: state directory %s is not writable: %w", dir, err)
	}
	_, werr := probe.Write([]byte("probe"))
	serr := probe.Sync()
	probe.Close()
	os.Remove(probe.Name())
	if err := errors.Join(werr, serr); err != nil {
		return nil, fmt.Errorf("statestore: state directory %s is not writable: %w", dir, err)
	}
	lock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("statestore: state directory %s: %w", dir, err)
	}
	s := &Store{dir: dir, logger: logger, lock: lock, known: map[string]bool{}}
	if err := s.loadManifest(o.RebuildCorruptManifest); err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

// RebuiltCorruptManifest reports whether Open found the manifest corrupt and
// rebuilt it (Options.RebuildCorruptManifest).
func (s *Store) RebuiltCorruptManifest() bool { return s.rebuiltCorrupt }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the directory lock. Further calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.Close()
}

func (s *Store) loadManifest(rebuildCorrupt bool) error {
	buf, err := os.ReadFile(filepath.Join(s.dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return s.rebuildManifest("state manifest missing; rebuilt from the state files present", false)
	}
	if err != nil {
		return fmt.Errorf("statestore: reading state manifest in %s: %w", s.dir, err)
	}
	payload, err := decodeState(buf)
	if err != nil && rebuildCorrupt {
		s.rebuiltCorrupt = true
		return s.rebuildManifest("state manifest corrupt ("+err.Error()+"); rebuilt from the state files present", true)
	}
	if err != nil {
		return fmt.Errorf("state manifest %s: %w", filepath.Join(s.dir, manifestName), err)
	}
	for line := range strings.SplitSeq(string(payload), "\n") {
		if line != "" {
			s.known[line] = true
		}
	}
	return nil
}

// rebuildManifest records the names of the state files present (a manifest
// deleted, or a directory from elsewhere: those names existed) and logs why;
// a corrupt manifest is always rewritten.
func (s *Store) rebuildManifest(why string, corrupt bool) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("statestore: reading state directory %s: %w", s.dir, err)
	}
	for _, e := range entries {
		if base, ok := strings.CutSuffix(e.Name(), stateSuffix); ok && !e.IsDir() {
			if name, err := decodeFileName(base); err == nil {
				s.known[name] = true
			}
		}
	}
	if len(s.known) == 0 && !corrupt {
		return nil
	}
	s.logger.Warn(why, "dir", s.dir, "names", len(s.known))
	return s.writeManifest()
}

func (s *Store) writeManifest() error {
	names := make([]string, 0, len(s.known))
	for n := range s.known {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return s.writeAtomic(manifestName, encodeState(b.Bytes()))
}

// Save stores data under name atomically and durably: write a temp file,
// fsync it, rename it over the old file, fsync the directory. The first Save
// of a name also records it in the directory's manifest (before the data),
// so a later disappearance is reported as ErrMissing.
func (s *Store) Save(name string, data []byte) error {
	file, err := fileName(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.known[name] {
		s.known[name] = true
		if err := s.writeManifest(); err != nil {
			delete(s.known, name)
			return err
		}
	}
	return s.writeAtomic(file, encodeState(data))
}

func (s *Store) writeAtomic(file string, content []byte) (err error) {
	tmp, err := os.CreateTemp(s.dir, "."+file+".tmp-*")
	if err != nil {
		return fmt.Errorf("statestore: saving state %s: %w", file, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(content); err != nil {
		return fmt.Errorf("statestore: saving state %s: %w", file, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("statestore: saving state %s: fsync: %w", file, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("statestore: saving state %s: %w", file, err)
	}
	if err = os.Rename(tmp.Name(), filepath.Join(s.dir, file)); err != nil {
		return fmt.Errorf("statestore: saving state %s: rename: %w", file, err)
	}
	if err = syncDir(s.dir); err != nil {
		return fmt.Errorf("statestore: saving state %s: fsync dir: %w", file, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Load returns the bytes last saved under name. Errors: ErrNotFound if the
// name was never saved in this directory (a fresh start is safe), ErrMissing
// if it was saved before but the file is gone (NOT safe to start fresh),
// ErrCorrupt if the file fails its checks.
func (s *Store) Load(name string) ([]byte, error) {
	file, err := fileName(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	path := filepath.Join(s.dir, file)
	buf, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if s.known[name] {
			return nil, fmt.Errorf("state %q (%s): %w", name, path, ErrMissing)
		}
		return nil, fmt.Errorf("state %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("statestore: loading state %q: %w", name, err)
	}
	payload, err := decodeState(buf)
	if err != nil {
		return nil, fmt.Errorf("state %q (%s): %w", name, path, err)
	}
	return payload, nil
}

// Delete forgets name on purpose: removes its file and its manifest entry, so
// the next Load returns ErrNotFound. Use only for an operator-requested reset.
func (s *Store) Delete(name string) error {
	file, err := fileName(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := os.Remove(filepath.Join(s.dir, file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("statestore: deleting state %q: %w", name, err)
	}
	if s.known[name] {
		delete(s.known, name)
		if err := s.writeManifest(); err != nil {
			return err
		}
	}
	return syncDir(s.dir)
}

// FileName returns the file name (inside the store's directory) used for
// name: bytes outside [A-Za-z0-9_-] (and a leading '.') are percent-encoded;
// names whose encoding exceeds 200 bytes are shortened with a SHA-256 suffix.
// It rejects empty names, "." and "..", path separators and NUL.
func FileName(name string) (string, error) { return fileName(name) }

func fileName(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return "", fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	enc := b.String()
	if len(enc) > 200 {
		sum := sha256.Sum256([]byte(name))
		enc = enc[:100] + "~" + hex.EncodeToString(sum[:16])
	}
	return enc + stateSuffix, nil
}

// decodeFileName reverses the percent-encoding (hashed names cannot be reversed).
func decodeFileName(base string) (string, error) {
	if strings.Contains(base, "~") {
		return "", errors.New("hashed name")
	}
	var b strings.Builder
	for i := 0; i < len(base); i++ {
		if base[i] == '%' && i+2 < len(base) {
			v, err := hex.DecodeString(base[i+1 : i+3])
			if err != nil {
				return "", err
			}
			b.WriteByte(v[0])
			i += 2
			continue
		}
		b.WriteByte(base[i])
	}
	return b.String(), nil
}
