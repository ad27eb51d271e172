package compute

// Group is this process's membership of a group of processes that pass tensors to one
// another: the ranks of a model split over several machines (runner/pipeline).
// Besides the tensors a context sends, ranks exchange small control messages
// (SendInts, RecvInts), which block until the peer takes part.
type Group interface {
	Rank() int
	Size() int
	SendInts(v []int32, dst int) error
	RecvInts(n, src int) ([]int32, error)
}

// Distributed is a backend that can join a group of processes and run its transfers
// (a context's Send and Recv) over it. The pipeline reaches it through this interface
// so that it never imports the backend that implements it.
type Distributed interface {
	// JoinDistributed joins the group that transport ("ring", "jaccl", "mpi", or ""
	// for the backend's choice) forms from the process's environment, and binds it to
	// this backend. A process joins once.
	JoinDistributed(transport string) (Group, error)
	// UseDistributed binds a group joined on another backend of this process to this
	// one, so that a model opened on its own backend transfers over the same group.
	UseDistributed(g Group) error
}
