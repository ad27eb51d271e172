package kvstore

import "golang.org/x/sys/cpu"

// prefillSIMD reports whether mm6x16 has its assembly kernel (prefill_amd64.s).
var prefillSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func mm6x16(a *float32, astride int, b *float32, bstride int, n int, c *float32, cstride int, acc bool, panels, bnext, cnext int)
