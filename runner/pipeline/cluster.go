package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/compute"
)

// The processes: rank 0 is the server, every other machine runs a worker (RunWorker).
// They join one MLX distributed group (the ring backend by default, set up from the
// hostfile as mlx.launch does), and each worker keeps a TCP connection to rank 0 besides
// it: MLX's ring has no timeout and no notice of a peer that died, so that connection is
// how rank 0 learns that a rank is gone (and the worker that rank 0 is), and how rank 0
// wakes an idle worker without it polling MLX's socket.

// envFirst is the first of keys set in the environment, and its value (keys[0] and ""
// when none is).
func envFirst(keys ...string) (string, string) {
	for _, k := range keys {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return k, v
		}
	}
	return keys[0], ""
}

// readHostfile reads an MLX hostfile: a JSON list with one list of "host:port" per rank.
func readHostfile(path string) ([][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var hosts [][]string
	if err := json.Unmarshal(data, &hosts); err != nil {
		return nil, fmt.Errorf("%s: an MLX hostfile is a JSON list of lists of \"host:port\": %w", path, err)
	}
	if len(hosts) < 2 {
		return nil, fmt.Errorf("%s: %d ranks; a pipeline needs at least 2", path, len(hosts))
	}
	for r, h := range hosts {
		if len(h) == 0 {
			return nil, fmt.Errorf("%s: rank %d has no address", path, r)
		}
	}
	return hosts, nil
}

// joinGroup points MLX at the hostfile and rank and joins the group on b.
// MLXG_DISTRIBUTED_BACKEND names MLX's backend ("ring" by default).
func joinGroup(b compute.Backend, hostfile string, rank int, log *slog.Logger) (compute.Group, [][]string, error) {
	mb, ok := b.(compute.Distributed)
	if !ok {
		return nil, nil, fmt.Errorf("several machines need the MLX backend (%s runs here; on Linux set MLXG_BACKEND=mlx)", b.Name())
	}
	hosts, err := readHostfile(hostfile)
	if err != nil {
		return nil, nil, err
	}
	if rank < 0 || rank >= len(hosts) {
		return nil, nil, fmt.Errorf("rank %d, but %s lists %d ranks", rank, hostfile, len(hosts))
	}
	abs, _ := filepath.Abs(hostfile)
	os.Setenv("MLX_HOSTFILE", abs)
	os.Setenv("MLX_RANK", strconv.Itoa(rank))
	_, bk := envFirst("MLXG_DISTRIBUTED_BACKEND")
	if bk == "" {
		bk = "ring"
	}
	log.Info("joining the MLX group (waits for every rank)", "backend", bk, "rank", rank, "ranks", len(hosts), "hostfile", abs)
	g, err := mb.JoinDistributed(bk)
	if err != nil {
		return nil, nil, fmt.Errorf("joining the MLX %s group as rank %d of %s: %w", bk, rank, abs, err)
	}
	if g.Size() != len(hosts) || g.Rank() != rank {
		return nil, nil, fmt.Errorf("MLX made this rank %d of %d; the hostfile says %d of %d", g.Rank(), g.Size(), rank, len(hosts))
	}
	return g, hosts, nil
}

// Cluster is rank 0's view of the machines: its Leader, and the workers' liveness
// connections.
type Cluster struct {
	group  compute.Group
	leader *Leader
	hosts  [][]string
	ln     net.Listener
	log    *slog.Logger

	mu      sync.Mutex
	alive   map[int]bool
	conns   map[int]net.Conn
	closing bool // the server stops the workers itself
}

// Start makes this process rank 0 of the hostfile's group, on b (which stays open for
// the server's life): it waits for the workers and opens the liveness listener they
// connect to. Its Leader then loads models as pipelines (runner.LoadOptions.Pipeline).
// MLXG_RANK_TIMEOUT bounds one exchange with the workers (10m by default).
func Start(b compute.Backend, hostfile string, log *slog.Logger) (*Cluster, error) {
	if _, r := envFirst("MLX_RANK"); r != "" && r != "0" {
		return nil, fmt.Errorf("MLX_RANK=%s: `mlxg serve` is rank 0; run `mlxg worker --rank %s` on that machine", r, r)
	}
	g, hosts, err := joinGroup(b, hostfile, 0, log)
	if err != nil {
		return nil, err
	}
	leader, err := NewLeader(g)
	if err != nil {
		return nil, err
	}
	leader.Timeout = 10 * time.Minute
	if k, v := envFirst("MLXG_RANK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s=%q: want a duration such as 10m", k, v)
		}
		leader.Timeout = d
	}
	host, _, err := net.SplitHostPort(hosts[0][0])
	if err != nil {
		return nil, fmt.Errorf("rank 0's address %q: %w", hosts[0][0], err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listening for the workers' liveness connections: %w", err)
	}
	c := &Cluster{group: g, leader: leader, hosts: hosts, ln: ln, log: log, alive: map[int]bool{}, conns: map[int]net.Conn{}}
	leader.SetHosts(strings.Split(c.hostList(), ","))
	go c.accept()
	if err := leader.Hello(ln.Addr().String()); err != nil {
		ln.Close()
		return nil, err
	}
	// Every worker has dialled by now; wait until each is registered, then ring their
	// doorbells before each message.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		n := len(c.conns)
		c.mu.Unlock()
		if n == len(hosts)-1 {
			break
		}
		if time.Now().After(deadline) {
			ln.Close()
			return nil, fmt.Errorf("only %d of %d workers connected their liveness connection to rank 0", n, len(hosts)-1)
		}
	}
	leader.Doorbell = c.ring
	log.Info("pipeline ready: models are split over the ranks by layers", "ranks", g.Size(), "hosts", c.hostList())
	return c, nil
}

// accept takes the workers' liveness connections: each says its rank, then stays open;
// when one closes, that rank is gone and the pipeline fails its requests.
func (c *Cluster) accept() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			rd := bufio.NewReader(conn)
			line, err := rd.ReadString('\n')
			r, perr := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || perr != nil || r <= 0 || r >= len(c.hosts) {
				c.log.Warn("a liveness connection that is not a worker's", "from", conn.RemoteAddr())
				return
			}
			c.mu.Lock()
			c.alive[r], c.conns[r] = true, conn
			c.mu.Unlock()
			for {
				if _, err := rd.ReadByte(); err != nil {
					break
				}
			}
			c.mu.Lock()
			c.alive[r] = false
			closing := c.closing
			c.mu.Unlock()
			if closing {
				return
			}
			err = fmt.Errorf("rank %d (%s) is gone", r, c.hosts[r][0])
			c.log.Error("pipeline worker disconnected", "rank", r, "host", c.hosts[r][0])
			c.leader.RankGone(r, err)
		}()
	}
}

// Leader is rank 0's side of the pipeline.
func (c *Cluster) Leader() *Leader { return c.leader }

func (c *Cluster) hostList() string {
	var s []string
	for _, h := range c.hosts {
		s = append(s, h[0])
	}
	return strings.Join(s, ",")
}

// ring tells every worker that a control message is coming: one byte on its liveness
// connection (they wait for it rather than in MLX's receive, which polls).
func (c *Cluster) ring() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r, conn := range c.conns {
		conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte{1}); err != nil {
			return fmt.Errorf("rank %d (%s) is gone: %w", r, c.hosts[r][0], err)
		}
	}
	return nil
}

// ForModel wraps open, which opens a model's own backend, to give that backend the
// group: the stage's transfers run on the model's backend.
func (c *Cluster) ForModel(open func() (compute.Backend, error)) func() (compute.Backend, error) {
	return func() (compute.Backend, error) {
		b, err := open()
		if err != nil {
			return nil, err
		}
		if mb, ok := b.(compute.Distributed); ok && c != nil {
			if err := mb.UseDistributed(c.group); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
}

// ExitIfStuck calls exit (which ends the process) once ctx is done (the server shutting
// down) and grace and 5 s more have passed, when the pipeline broke: a transfer left
// blocked inside MLX holds its model's backend, whose unload would otherwise wait for
// it forever.
func (c *Cluster) ExitIfStuck(ctx context.Context, grace time.Duration, exit func()) {
	go func() {
		<-ctx.Done()
		if c.leader.Broken() == nil {
			return
		}
		time.Sleep(grace + 5*time.Second)
		c.log.Error("exiting: a model split over several machines lost a rank and its MLX transfer is stuck")
		exit()
	}()
}

// Close ends the workers (when they can still be reached) and the listener.
func (c *Cluster) Close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	if c.leader.Broken() == nil {
		if err := c.leader.Stop(); err != nil {
			c.log.Warn("stopping the workers", "err", err)
		}
	}
	c.ln.Close()
}

// resolveModelDir finds rank 0's model directory on this machine: the same path, or
// the same snapshot (models--org--name/snapshots/<commit>) under this machine's
// Hugging Face cache.
func resolveModelDir(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, nil
	}
	parts := strings.Split(filepath.ToSlash(dir), "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "models--") {
			store, err := registry.DefaultStore()
			if err != nil {
				return "", err
			}
			local := filepath.Join(append([]string{store.HubCache}, parts[i:]...)...)
			if _, err := os.Stat(filepath.Join(local, "config.json")); err == nil {
				return local, nil
			}
			return "", fmt.Errorf("the model is not on this machine (looked in %s and %s): `mlxg pull` it here too", dir, local)
		}
	}
	return "", fmt.Errorf("the model is not on this machine at %s: copy it there, or pull it", dir)
}
