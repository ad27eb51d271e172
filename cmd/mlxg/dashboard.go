package main

import (
	"os"
	"strings"
)

// envOff reports whether the environment variable key turns a feature off ("0", "false", "off", "no").
func envOff(key string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(key))) {
	case "0", "false", "off", "no":
		return true
	}
	return false
}
