// Package files holds the small file operations that several packages writing
// checkpoint folders share.
package files

import (
	"io"
	"os"
)

// Copy copies the file src to dst, creating or truncating dst. An error closing dst
// is returned too: that is where a full disk shows on some filesystems.
func Copy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
