//go:build unix && !linux

package supervise

import "os"

// treeHelperMain: the containment tests are Linux only.
func treeHelperMain() { os.Exit(5) }
