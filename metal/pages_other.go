//go:build !linux

package metal

import "unsafe"

// dropPages does nothing here: on a Mac Metal wraps the checkpoint's pages in place.
func dropPages(unsafe.Pointer, int) {}
