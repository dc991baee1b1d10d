package jupyter

import (
	"sync"
	"sync/atomic"
)

// queue is an unbounded per-request inbox: readers append without ever blocking,
// the waiting request drains it. Output messages beyond max queued bytes are
// dropped (and counted) so a stalled consumer cannot exhaust memory; control
// messages (status, replies, errors) are always kept.
type queue struct {
	mu      sync.Mutex
	msgs    []*Message
	bytes   int64
	max     int64
	dropped int
	notify  chan struct{}
}

func newQueue(max int64) *queue {
	return &queue{max: max, notify: make(chan struct{}, 1)}
}

// droppable reports message types that only carry output.
func droppable(t string) bool {
	switch t {
	case "stream", "display_data", "update_display_data", "execute_result", "execute_input":
		return true
	}
	return false
}

func msgSize(m *Message) int64 {
	n := int64(len(m.Content) + len(m.Metadata))
	for _, b := range m.Buffers {
		n += int64(len(b))
	}
	return n
}

func (q *queue) push(m *Message) {
	size := msgSize(m)
	q.mu.Lock()
	if q.max > 0 && q.bytes+size > q.max && droppable(m.Type()) {
		q.dropped++
		q.mu.Unlock()
		return
	}
	q.msgs = append(q.msgs, m)
	q.bytes += size
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// drain takes every queued message, oldest first.
func (q *queue) drain() []*Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs, q.bytes = nil, 0
	return out
}

func (q *queue) droppedCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// router hands received messages to the request they answer, keyed by
// parent_header.msg_id (Jupyter routes replies and side effects only that way).
// Messages for no pending request are discarded.
type router struct {
	mu      sync.Mutex
	pending map[string]*queue
	badSig  atomic.Uint64
	orphans atomic.Uint64
}

func newRouter() *router { return &router{pending: map[string]*queue{}} }

func (r *router) register(msgID string, q *queue) {
	r.mu.Lock()
	r.pending[msgID] = q
	r.mu.Unlock()
}

func (r *router) unregister(ids ...string) {
	r.mu.Lock()
	for _, id := range ids {
		delete(r.pending, id)
	}
	r.mu.Unlock()
}

// dispatch delivers m; "iopub_welcome" (JEP 65) has no parent and goes to every
// pending request.
func (r *router) dispatch(m *Message) {
	r.mu.Lock()
	if m.Type() == "iopub_welcome" {
		qs := make([]*queue, 0, len(r.pending))
		for _, q := range r.pending {
			qs = append(qs, q)
		}
		r.mu.Unlock()
		for _, q := range qs {
			q.push(m)
		}
		return
	}
	q := r.pending[m.ParentHeader.MsgID]
	r.mu.Unlock()
	if q == nil {
		r.orphans.Add(1)
		return
	}
	q.push(m)
}
