//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// newProcessGroup puts the server in its own process group, so that stopping it also stops
// the runner processes it starts (Ollama runs models in a child process).
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGTERM (or SIGKILL) to the server's process group.
func signalGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(-cmd.Process.Pid, sig)
}
