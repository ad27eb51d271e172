//go:build !unix

package main

import "os/exec"

func newProcessGroup(cmd *exec.Cmd) {}

// signalGroup can only kill the server itself here.
func signalGroup(cmd *exec.Cmd, kill bool) { cmd.Process.Kill() }
