//go:build !linux

package bundle

import "os/exec"

// dieWithParent does nothing: only Linux kills a child when its parent
// dies. The tests still kill their children when they end normally.
func dieWithParent(*exec.Cmd) {}
