package bundle

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process should the test binary die
// first (a timeout panic), so that no child outlives the test run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
