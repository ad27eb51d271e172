package metal

import (
	"fmt"
	"math"
	"os/signal"
	"syscall"

	"github.com/mlxg/mlxg/runner/compute"
)

// MLX's distributed layer (mlx/c/distributed.h, distributed_group.h): a group of
// processes, one per machine, joined by one of MLX's backends ("ring": TCP over
// Ethernet or Thunderbolt, set up from MLX_HOSTFILE and MLX_RANK; "jaccl": RDMA over
// Thunderbolt 5 on recent macOS; "mpi"). mlxg uses it for pipeline parallelism
// (runner/pipeline's stages): activations go rank to rank with send and recv, and so do
// the small control messages that keep the workers in step with rank 0.
//
// The ring backend talks only to a rank's two neighbours (rank-1 and rank+1 modulo
// the size) and runs its transfers on the CPU stream whatever the device, so every
// transfer here names a neighbour and runs on a CPU stream of its own. A transfer
// blocks inside mlx_eval until its peer takes part; a peer that died leaves it
// blocked (MLX's ring has no timeout), which is why rank 0 watches its workers
// separately (runner/pipeline's Cluster).

// Group is this process's membership of an MLX distributed group.
type Group struct {
	b          *Backend
	g          mlxGroup
	rank, size int
	backend    string
	cpu        mlxStream // the stream transfers run on
}

// DistributedAvailable reports whether lib has MLX's distributed layer, as bound here.
func (l *Lib) DistributedAvailable() bool {
	return l.distInit != nil && l.send != nil && l.recv != nil && l.allSum != nil && l.ABI == "0.6"
}

// JoinGroup initialises MLX's distributed layer with backend ("ring", "jaccl", "mpi",
// or "" for MLX's choice) from the environment MLX reads (MLX_RANK and MLX_HOSTFILE
// for the ring), strictly: a process that cannot join fails rather than running as a
// group of one. It binds the group to b, whose contexts then Send and Recv over it.
// MLX keeps one group per process: join once.
func (b *Backend) JoinGroup(backend string) (*Group, error) {
	l := b.lib
	if l.distInit == nil || l.send == nil || l.recv == nil || l.allSum == nil {
		return nil, fmt.Errorf("metal: %s has no distributed layer (mlx_distributed_init); it needs mlx-c 0.6 or newer", l.Path)
	}
	if l.ABI != "0.6" {
		return nil, fmt.Errorf("metal: %s is mlx-c %s; the distributed layer is bound for mlx-c 0.6", l.Path, l.ABI)
	}
	// MLX's ring sends with plain send(2) on threads of its own: to a peer that died,
	// that raises SIGPIPE on a non-Go thread, whose default action ends the process
	// (Go forwards such signals). Ignored, the send fails with EPIPE instead and rank 0's
	// watch on its workers reports the lost rank.
	signal.Ignore(syscall.SIGPIPE)
	grp := &Group{b: b, backend: backend}
	err := b.do(func() error {
		var g mlxGroup
		if err := status("mlx_distributed_init", l.distInit(&g, true, backend)); err != nil {
			return err
		}
		if g == 0 {
			return &Error{Op: "mlx_distributed_init", Msg: "no group"}
		}
		grp.g = g
		grp.rank = int(l.groupRank(g))
		grp.size = int(l.groupSize(g))
		s, err := handle("mlx_default_cpu_stream_new", l.defaultCPUStream())
		if err != nil {
			return err
		}
		grp.cpu = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.group, b.comm = grp, grp.cpu
	b.mu.Unlock()
	return grp, nil
}

// UseGroup lets b's contexts Send and Recv over g, a group another backend joined
// (a model's own backend, on a server whose group outlives its models).
func (b *Backend) UseGroup(g *Group) error {
	if g == nil {
		return fmt.Errorf("metal: UseGroup of no group")
	}
	var s mlxStream
	err := b.do(func() error {
		var err error
		s, err = handle("mlx_default_cpu_stream_new", b.lib.defaultCPUStream())
		return err
	})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.group, b.comm = g, s
	b.mu.Unlock()
	return nil
}

// Rank is this process's rank, 0 .. Size()-1.
func (g *Group) Rank() int { return g.rank }

// Size is the number of processes in the group.
func (g *Group) Size() int { return g.size }

// Backend is the name the group was joined with.
func (g *Group) Backend() string { return g.backend }

// neighbour checks that peer is next to this rank on the ring.
func (g *Group) neighbour(peer int) error {
	if peer < 0 || peer >= g.size || peer == g.rank {
		return fmt.Errorf("metal: rank %d of %d cannot talk to rank %d", g.rank, g.size, peer)
	}
	if peer != (g.rank+1)%g.size && peer != (g.rank+g.size-1)%g.size {
		return fmt.Errorf("metal: rank %d talks only to its neighbours on the ring, not to rank %d", g.rank, peer)
	}
	return nil
}

func (gr *Group) sendArr(g *graph, s mlxStream, x mlxArray, dst int) mlxArray {
	return g.call("mlx_distributed_send", func(r *mlxArray) int32 { return g.l.send(r, x, int32(dst), gr.g, s) })
}

func (gr *Group) recvArr(g *graph, s mlxStream, dt mlxDtype, src int, shape ...int) mlxArray {
	sp, n := ints(shape)
	return g.call("mlx_distributed_recv", func(r *mlxArray) int32 { return g.l.recv(r, sp, n, dt, int32(src), gr.g, s) })
}

// SendInts sends v to the neighbouring rank dst (which must RecvInts as many) and
// returns once MLX has handed it over.
func (gr *Group) SendInts(v []int32, dst int) error {
	if err := gr.neighbour(dst); err != nil {
		return err
	}
	if len(v) == 0 {
		return fmt.Errorf("metal: SendInts of nothing")
	}
	return gr.b.graph(func(g *graph) error {
		g.eval(gr.sendArr(g, gr.cpu, g.fromInt32s(v, len(v)), dst))
		return g.err
	})
}

// RecvInts receives n int32 values that the neighbouring rank src sends, blocking
// until they come.
func (gr *Group) RecvInts(n, src int) ([]int32, error) {
	if err := gr.neighbour(src); err != nil {
		return nil, err
	}
	var out []int32
	err := gr.b.graph(func(g *graph) error {
		// Received as int32 and read through a float32 view of the same bits.
		a := g.contiguous(g.view(gr.recvArr(g, gr.cpu, dtInt32, src, n), dtFloat32))
		g.eval(a)
		f := g.read(a)
		if g.err != nil {
			return g.err
		}
		out = make([]int32, len(f))
		for i, x := range f {
			out[i] = int32(math.Float32bits(x))
		}
		return nil
	})
	return out, err
}

// AllSum sums x over the group, elementwise; every rank calls it with as many values.
func (gr *Group) AllSum(x []float32) ([]float32, error) {
	return gr.collective("mlx_distributed_all_sum", gr.b.lib.allSum, x)
}

// AllGather concatenates every rank's x in rank order; every rank calls it with as
// many values.
func (gr *Group) AllGather(x []float32) ([]float32, error) {
	return gr.collective("mlx_distributed_all_gather", gr.b.lib.allGather, x)
}

// collective runs one of MLX's collective operations, op (named name in errors), over
// x on the CPU stream and reads its float32 result.
func (gr *Group) collective(name string, op func(res *mlxArray, x mlxArray, g mlxGroup, s mlxStream) int32, x []float32) ([]float32, error) {
	var out []float32
	err := gr.b.graph(func(g *graph) error {
		a := g.call(name, func(r *mlxArray) int32 { return op(r, g.fromFloat32s(x, len(x)), gr.g, gr.cpu) })
		a = g.float32Array(a)
		g.eval(a)
		out = g.read(a)
		return g.err
	})
	return out, err
}

// Send records sending x (float32) to the neighbouring rank dst as part of the pass;
// the result is x itself once sent: evaluating it (Float32s) performs the transfer
// together with the rest of the step.
func (c *context) Send(x compute.Tensor, dst int) compute.Tensor {
	a, ok := c.args(x)
	if !ok {
		return nilTensor
	}
	gr, cs := c.group()
	if gr == nil {
		return c.fail("Send: the backend has joined no distributed group")
	}
	if err := gr.neighbour(dst); err != nil {
		return c.fail("Send: %v", err)
	}
	t := a[0]
	return c.record(t.rows, t.cols, func(g *graph) mlxArray {
		return gr.sendArr(g, cs, g.contiguous(g.astype(t.arr, dtFloat32)), dst)
	})
}

// Recv records receiving a rows × cols float32 tensor from the neighbouring rank src.
func (c *context) Recv(rows, cols, src int) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	gr, cs := c.group()
	if gr == nil {
		return c.fail("Recv: the backend has joined no distributed group")
	}
	if err := gr.neighbour(src); err != nil {
		return c.fail("Recv: %v", err)
	}
	if rows <= 0 || cols <= 0 {
		return c.fail("Recv of %d×%d", rows, cols)
	}
	return c.record(rows, cols, func(g *graph) mlxArray { return gr.recvArr(g, cs, dtFloat32, src, rows, cols) })
}

func (c *context) group() (*Group, mlxStream) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.b.group, c.b.comm
}

// Zeros records a rows × cols float32 tensor of zeros.
func (c *context) Zeros(rows, cols int) compute.Tensor {
	if c.err != nil {
		return nilTensor
	}
	if rows <= 0 || cols <= 0 {
		return c.fail("Zeros of %d×%d", rows, cols)
	}
	return c.record(rows, cols, func(g *graph) mlxArray {
		return g.broadcastTo(g.scalar(0), rows, cols)
	})
}
