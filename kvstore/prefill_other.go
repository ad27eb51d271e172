//go:build !amd64

package kvstore

// prefillSIMD is false where prefill_amd64.s does not build: the plain kernel runs.
var prefillSIMD = false

func mm6x16(a *float32, astride int, b *float32, bstride int, n int, c *float32, cstride int, acc bool, panels, bnext, cnext int) {
	panic("unreachable")
}
