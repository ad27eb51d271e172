package pipeline

import "fmt"

// Wire is the pipeline's control channel between neighbouring ranks: small int32
// messages over the same MLX group the activations use (metal.Group).
type Wire interface {
	Rank() int
	Size() int
	SendInts(v []int32, dst int) error
	RecvInts(n, src int) ([]int32, error)
}

// The control protocol. Rank 0 sends each message to rank 1, which passes it on to
// rank 2 before acting on it, and so on: the ring backend connects neighbours only.
// A message is a header of headerLen int32s, then, when its length word is non-zero,
// that many int32s of payload (a forward pass's tokens, a model's directory), then its
// layout and its media places (their lengths are header words too). The header carries
// the protocol's version: a rank that receives another version fails with a clear error
// rather than misreading the message (every rank must run the same mlxg). Every
// message but OpStop is answered by a status that goes around the ring (rank 1 starts
// it, each rank puts in its own failure, the last rank hands it to rank 0; see status).
const (
	headerLen = 11
	magic     = 0x6d6c7867 // "mlxg"
	version   = 2          // 2: the header's version and media words (Message.Media)

	// OpForward runs a pass of model Model: payload its tokens; Seq names the
	// sequence, Start is the position of its first token (a worker whose caches hold
	// more truncates them: that is how a cancelled or rewound sequence reaches it), All
	// asks for every row's logits, FP32 for float32 caches. Layout, sent with a
	// sequence's first pass, describes every layer's cache (kvstore.Describe) as rank 0's
	// memory policy made it, so that each rank keeps its layers' KV as one process would.
	// Media, when the sequence has images, holds their places (mediaPlaces).
	OpForward = 1
	// OpLoad loads a model as Model: payload its directory on rank 0; Start is the
	// context the server loads it for (the workers' memory policies plan for it).
	OpLoad = 2
	// OpUnload drops model Model.
	OpUnload = 3
	// OpStop ends the workers (no status).
	OpStop = 4
	// OpPing checks that every rank answers.
	OpPing = 5
	// OpHello tells the workers where rank 0 listens for their liveness connection:
	// payload its address.
	OpHello = 6
	// OpRestore restores a sequence's cached prefix on every rank from its own prefix
	// cache: payload the tokens (at most Start of them are wanted; rank 0 restored
	// Start), Layout as for OpForward. A worker that restores fewer answers statusShort.
	OpRestore = 7
	// OpSave saves the blocks of a sequence's tokens (payload) into each rank's prefix cache.
	OpSave = 8
	// OpEnd ends a sequence's prefix-cache session on each rank.
	OpEnd = 9
	// OpForwardBatch runs one batched pass of several sequences of model Model (Seq of
	// them): payload, per sequence, its id, start, token count and layout length, then
	// its tokens and its layout (as OpForward's); Media holds every sequence's media
	// places in turn (mediaPlaces, a 0 for one without images). The logits are each
	// sequence's last row.
	OpForwardBatch = 10
)

// Status codes of the status round, the worst of all ranks.
const (
	statusOK     = 0
	statusShort  = 1 // a prefix restore got fewer positions than rank 0's
	statusFailed = 2
)

// Message is one control message.
type Message struct {
	Op      int32
	Model   int32
	Seq     int32
	Start   int32
	All     bool
	FP32    bool
	Hidden  bool // the last rank sends the head's input (the final normed hidden state) instead of the logits
	Payload []int32
	Layout  []int32
	Media   []int32 // the pass's media places (mediaPlaces): what every rank's layers need of its images
}

func (m Message) header() []int32 {
	h := make([]int32, headerLen)
	h[0], h[1], h[2], h[3], h[4], h[7], h[8] = magic, m.Op, int32(len(m.Payload)+len(m.Layout)+len(m.Media)), m.Seq, m.Start, m.Model, int32(len(m.Layout))
	h[9], h[10] = version, int32(len(m.Media))
	if m.All {
		h[5] |= 1
	}
	if m.Hidden {
		h[5] |= 2
	}
	if m.FP32 {
		h[6] = 1
	}
	return h
}

// sendMessage sends m to the next rank.
func sendMessage(w Wire, m Message) error {
	next := w.Rank() + 1
	if err := w.SendInts(m.header(), next); err != nil {
		return err
	}
	if len(m.Payload)+len(m.Layout)+len(m.Media) > 0 {
		return w.SendInts(append(append(append([]int32(nil), m.Payload...), m.Layout...), m.Media...), next)
	}
	return nil
}

// recvMessage receives the next message from the rank before and passes it on to the
// next rank, unless this is the last.
func recvMessage(w Wire) (Message, error) {
	r := w.Rank()
	h, err := w.RecvInts(headerLen, r-1)
	if err != nil {
		return Message{}, err
	}
	if h[0] != magic {
		return Message{}, fmt.Errorf("model: rank %d received a control message that is not mlxg's (%#x)", r, h[0])
	}
	if h[9] != version {
		return Message{}, fmt.Errorf("model: rank %d received a control message of protocol version %d, it speaks %d: every rank must run the same mlxg", r, h[9], version)
	}
	m := Message{Op: h[1], Seq: h[3], Start: h[4], All: h[5]&1 != 0, Hidden: h[5]&2 != 0, FP32: h[6] == 1, Model: h[7]}
	n, k, md := int(h[2]), int(h[8]), int(h[10])
	if n < 0 || k < 0 || md < 0 || k+md > n {
		return Message{}, fmt.Errorf("model: rank %d received a control message of %d values with %d of layout and %d of media", r, n, k, md)
	}
	if n > 0 {
		if m.Payload, err = w.RecvInts(n, r-1); err != nil {
			return m, err
		}
		if md > 0 {
			m.Payload, m.Media = m.Payload[:n-md], m.Payload[n-md:]
		}
		if k > 0 {
			p := len(m.Payload)
			m.Payload, m.Layout = m.Payload[:p-k], m.Payload[p-k:]
		}
	}
	if r < w.Size()-1 {
		if err := sendMessage(w, m); err != nil {
			return m, err
		}
	}
	return m, nil
}

// The status round carries a header of statusLen int32s (the code, the rank it is
// from, the length of its message), then, when that length is non-zero, the failing
// rank's error as text (at most maxStatusText bytes): rank 0 fails the request with the
// rank's own words.
const (
	statusLen     = 3
	maxStatusText = 512
)

// status is one rank's outcome, or the worst so far of the status round.
type status struct {
	code int32
	rank int
	text string
}

// passStatus is a worker's part of the status round: code is this rank's outcome, and
// failure, when it failed, why.
func passStatus(w Wire, code int32, failure error) error {
	r := w.Rank()
	st := status{code: code, rank: r}
	if failure != nil {
		st.text = failure.Error()
	}
	if r > 1 {
		prev, err := recvStatus(w, r-1)
		if err != nil {
			return err
		}
		if prev.code >= st.code {
			st = prev
		}
	}
	return sendStatus(w, st, (r+1)%w.Size())
}

func sendStatus(w Wire, st status, dst int) error {
	text := st.text
	if len(text) > maxStatusText {
		text = text[:maxStatusText-3] + "..."
	}
	if err := w.SendInts([]int32{st.code, int32(st.rank), int32(len(text))}, dst); err != nil {
		return err
	}
	if text == "" {
		return nil
	}
	return w.SendInts(Ints(text), dst)
}

func recvStatus(w Wire, src int) (status, error) {
	h, err := w.RecvInts(statusLen, src)
	if err != nil {
		return status{}, err
	}
	st := status{code: h[0], rank: int(h[1])}
	if n := int(h[2]); n < 0 || n > maxStatusText {
		return st, fmt.Errorf("model: a status of %d bytes from rank %d", n, src)
	} else if n > 0 {
		v, err := w.RecvInts(n, src)
		if err != nil {
			return st, err
		}
		st.text = Name(v)
	}
	return st, nil
}

// Ints and Name convert a string payload.
func Ints(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}

func Name(v []int32) string {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return string(b)
}
