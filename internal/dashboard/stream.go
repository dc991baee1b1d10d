package dashboard

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// eventStream writes NDJSON events to a streaming response, flushing each,
// and a blank line every streamKeepAlive while idle so proxies keep the
// response open. Safe for concurrent use.
type eventStream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	last time.Time
	done chan struct{}
	wg   sync.WaitGroup
}

func newEventStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &eventStream{w: w, rc: http.NewResponseController(w), last: time.Now(), done: make(chan struct{})}
	s.wg.Add(1)
	go s.keepAlive()
	return s
}

// send writes one event.
func (s *eventStream) send(ev any) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	s.write(append(b, '\n'))
}

func (s *eventStream) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(b)
	_ = s.rc.Flush()
	s.last = time.Now()
}

func (s *eventStream) keepAlive() {
	defer s.wg.Done()
	t := time.NewTicker(streamKeepAlive / 3)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			idle := time.Since(s.last) >= streamKeepAlive
			s.mu.Unlock()
			if idle {
				s.write([]byte("\n"))
			}
		}
	}
}

// stop ends the keep-alive; no write happens after it returns.
func (s *eventStream) stop() {
	close(s.done)
	s.wg.Wait()
}
