package metal_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mlxg/mlxg/metal/mlxtest"
)

// TestDistributedPrimitives runs two ranks of MLX's ring over loopback (this test
// binary twice) and checks all_sum, all_gather and send/recv between them.
func TestDistributedPrimitives(t *testing.T) {
	rank, isRank := mlxtest.Rank()
	if !isRank {
		outs := mlxtest.Ranks(t, 2, "TestDistributedPrimitives", 60*time.Second)
		for r, out := range outs {
			var got []float32
			mlxtest.Results(t, out, "sum", &got)
			if !slices.Equal(got, []float32{1, 3, 5}) {
				t.Errorf("rank %d: all_sum %v", r, got)
			}
		}
		return
	}
	b := mlxtest.Backend(t)
	g, err := b.JoinGroup("ring")
	if err != nil {
		t.Fatal(err)
	}
	if g.Rank() != rank || g.Size() != 2 {
		t.Fatalf("rank %d of %d, want %d of 2", g.Rank(), g.Size(), rank)
	}
	x := []float32{float32(rank), float32(1 + rank), float32(2 + rank)}
	sum, err := g.AllSum(x)
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Result("sum", sum)
	all, err := g.AllGather(x)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 1, 2, 1, 2, 3}; !slices.Equal(all, want) {
		t.Errorf("all_gather %v, want %v", all, want)
	}
	// Ping-pong: 0 sends, 1 receives and answers with the values plus one.
	peer := 1 - rank
	if rank == 0 {
		if err := g.SendInts([]int32{7, -3, 1 << 30}, peer); err != nil {
			t.Fatal(err)
		}
		back, err := g.RecvInts(3, peer)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int32{8, -2, 1<<30 + 1}; !slices.Equal(back, want) {
			t.Errorf("got back %v, want %v", back, want)
		}
	} else {
		v, err := g.RecvInts(3, peer)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			v[i]++
		}
		if err := g.SendInts(v, peer); err != nil {
			t.Fatal(err)
		}
	}
}
