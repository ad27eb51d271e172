//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// detach starts cmd in its own session, so that the background server outlives the terminal's Ctrl-C.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
