package dashboard

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/apikey"
)

// failedLoginDelay slows down guessing keys through the login form.
const failedLoginDelay = 500 * time.Millisecond

type loginData struct {
	Next  string
	Error string
}

// loginPage shows the login form (or goes on when already logged in).
func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if d.sessions.get(r) != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	d.pages.render(w, http.StatusOK, "login", pageData{Title: "Log in", Data: loginData{Next: next}})
}

// login checks the posted API key (form field "key", never a URL) and
// starts a session: the key stays on the server, the browser gets the
// session cookie. A wrong key re-renders the form with 401.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	key := strings.TrimSpace(r.PostFormValue("key"))
	next := safeNext(r.PostFormValue("next"))
	fail := func(status int, msg string) {
		d.pages.render(w, status, "login", pageData{Title: "Log in", Data: loginData{Next: next, Error: msg}})
	}
	if key == "" {
		fail(http.StatusBadRequest, "Enter an API key.")
		return
	}
	err := d.cfg.Check(r.Context(), key)
	switch {
	case errors.Is(err, apikey.ErrInvalid):
		time.Sleep(failedLoginDelay)
		d.cfg.Log.Info("dashboard login refused", "remote", r.RemoteAddr)
		fail(http.StatusUnauthorized, "That API key was not accepted. Check it and try again (cubby keys list on the server host shows the active keys).")
		return
	case err != nil:
		d.cfg.Log.Warn("dashboard login: cannot check the key", "err", err)
		fail(http.StatusServiceUnavailable, "The key could not be checked right now: "+err.Error())
		return
	}
	sess := d.sessions.create(key)
	setCookie(w, r, sess)
	d.cfg.Log.Info("dashboard login", "remote", r.RemoteAddr, "key", apikey.Hash(key)[:12])
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	d.sessions.end(sess)
	setCookie(w, r, nil)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
