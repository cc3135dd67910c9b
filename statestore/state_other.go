//go:build !unix

package statestore

import "os"

// lockDir only creates the lock file on platforms without flock.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
}
