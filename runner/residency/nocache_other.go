//go:build unix && !linux && !darwin

package residency

import "os"

func setNoCache(*os.File) {}
