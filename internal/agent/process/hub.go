package process

import (
	"sync"

	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
)

// DefaultSubscriberBacklog is the most output (bytes of data payload) a single
// subscriber may have queued but not yet sent before it is dropped.
//
// Fan-out policy: the process's output readers never wait for subscribers.
// Every chunk is appended to each attached subscriber's own queue. A subscriber
// whose queue would exceed its backlog limit is detached: it still sends what it
// had queued, then its stream ends with a `data_loss` error (it has a gap and must
// not pretend otherwise, so it never receives the end event). The process, the
// other subscribers and the recorded end event are unaffected; the client may
// re-attach with Connect and receive output from that point on.
const DefaultSubscriberBacklog = 16 << 20

// hub fans a process's events out to any number of subscribers. Data events are
// delivered live (a subscriber sees what is published after it attached); the
// single end event is remembered and handed to later subscribers too.
type hub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	end     *pb.ProcessEvent
	backlog int
}

func newHub(backlog int) *hub {
	return &hub{subs: map[*subscriber]struct{}{}, backlog: backlog}
}

// subscribe attaches a new subscriber. If the process already ended, the end
// event is queued for it at once.
func (h *hub) subscribe() *subscriber {
	s := &subscriber{limit: h.backlog, notify: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end != nil {
		s.push(h.end, 0)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// unsubscribe detaches s; publishing no longer reaches it.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// publish queues a data event (payload of n bytes) on every subscriber without
// blocking, detaching the ones whose backlog would overflow.
func (h *hub) publish(ev *pb.ProcessEvent, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if !s.push(ev, n) {
			delete(h.subs, s)
		}
	}
}

// finish records the end event, queues it on every subscriber and detaches them.
func (h *hub) finish(end *pb.ProcessEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.end = end
	for s := range h.subs {
		s.push(end, 0)
		delete(h.subs, s)
	}
}

// subscriber is one consumer's bounded queue of events.
type subscriber struct {
	mu      sync.Mutex
	queue   []*pb.ProcessEvent
	size    int // queued payload bytes
	limit   int
	dropped bool
	notify  chan struct{} // capacity 1: "queue changed"
}

// push appends ev (n payload bytes). It returns false, and marks the subscriber
// dropped, when the backlog limit would be exceeded.
func (s *subscriber) push(ev *pb.ProcessEvent, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return false
	}
	if n > 0 && s.size+n > s.limit {
		s.dropped = true
	} else {
		s.queue = append(s.queue, ev)
		s.size += n
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return !s.dropped
}

// take removes and returns everything queued, and whether the subscriber was
// dropped (in which case nothing more will ever be queued).
func (s *subscriber) take() ([]*pb.ProcessEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.size = nil, 0
	return q, s.dropped
}
