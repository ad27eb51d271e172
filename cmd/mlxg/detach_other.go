//go:build !unix

package main

import "os/exec"

// detach: other systems start the server as a plain child process.
func detach(cmd *exec.Cmd) {}
