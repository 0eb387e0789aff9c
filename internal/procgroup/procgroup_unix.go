//go:build unix

package procgroup

import (
	"os/exec"
	"syscall"
)

// Isolate makes cmd, once started, the leader of a new process group, and
// has the cancellation of its context kill the whole group with SIGKILL,
// so nothing the program started outlives it. Call it before cmd.Start, on
// a command made by exec.CommandContext.
func Isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// SetNice sets the scheduling niceness of every process in the group led by
// pid (an isolated command's). Processes the group starts later inherit it.
func SetNice(pid, nice int) error {
	return syscall.Setpriority(syscall.PRIO_PGRP, pid, nice)
}
