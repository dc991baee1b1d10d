package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// cookieName is the dashboard's session cookie: an opaque random ID; the API
// key it stands for stays in the server's memory.
const cookieName = "cubby_dashboard"

// session is one logged-in browser.
type session struct {
	id      string
	key     string // the API key every call of this session uses
	csrf    string // token required on every state-changing request
	created time.Time
	seen    time.Time
	flash   string // one-shot message for the next page
}

// sessions holds the logged-in sessions in memory (a restart logs everyone
// out). Safe for concurrent use.
type sessions struct {
	idle, max time.Duration
	now       func() time.Time

	mu   sync.Mutex
	byID map[string]*session
}

func newSessions(idle, max time.Duration) *sessions {
	return &sessions{idle: idle, max: max, now: time.Now, byID: map[string]*session{}}
}

// create starts a session for key.
func (s *sessions) create(key string) *session {
	now := s.now()
	sess := &session{id: randomToken(), key: key, csrf: randomToken(), created: now, seen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.byID {
		if s.expired(old, now) {
			delete(s.byID, id)
		}
	}
	s.byID[sess.id] = sess
	return sess
}

// get returns the live session of r's cookie and marks it used; nil when
// there is none or it expired (idle too long, or older than the maximum).
func (s *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[c.Value]
	if !ok {
		return nil
	}
	if s.expired(sess, now) {
		delete(s.byID, sess.id)
		return nil
	}
	sess.seen = now
	return sess
}

func (s *sessions) expired(sess *session, now time.Time) bool {
	return now.Sub(sess.seen) > s.idle || now.Sub(sess.created) > s.max
}

// end removes a session.
func (s *sessions) end(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sess.id)
}

// setFlash stores a message shown once by the next page.
func (s *sessions) setFlash(sess *session, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess.flash = msg
}

// takeFlash returns and clears the session's message.
func (s *sessions) takeFlash(sess *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := sess.flash
	sess.flash = ""
	return msg
}

// validCSRF reports whether token is the session's CSRF token.
func (sess *session) validCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(sess.csrf)) == 1
}

// setCookie sets (or, with sess nil, clears) the session cookie: HttpOnly,
// SameSite=Strict, scoped to the dashboard, Secure when the request came
// over TLS (directly or through a proxy that says so).
func setCookie(w http.ResponseWriter, r *http.Request, sess *session) {
	c := &http.Cookie{Name: cookieName, Path: Prefix + "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"}
	if sess == nil {
		c.MaxAge = -1
	} else {
		c.Value = sess.id
	}
	http.SetCookie(w, c)
}

// randomToken returns 32 random bytes, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
