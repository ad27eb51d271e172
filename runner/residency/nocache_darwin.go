package residency

import (
	"os"

	"golang.org/x/sys/unix"
)

func setNoCache(f *os.File) { unix.FcntlInt(f.Fd(), unix.F_NOCACHE, 1) }
