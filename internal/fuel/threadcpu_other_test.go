//go:build !linux

package fuel

import "time"

// threadCPU falls back to the wall clock where no thread CPU clock is read.
func threadCPU() int64 { return time.Now().UnixNano() }
