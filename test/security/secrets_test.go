package security

import (
	"bytes"
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", to read the server's database

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// TestSecretsAtRest: the data dir is 0700 and the database, its -wal/-shm and
// the server log 0600 after every start, even when they were wider before; a
// killed sandbox's row keeps no token or env var, and no copy of them is left
// in the database files; the server log holds no secret of the run.
func TestSecretsAtRest(t *testing.T) {
	s := startServer(t, "--log-level", "debug")
	s.wantPrivate(t, "first start")
	stored := s.teamKey(t, "")
	secrets := s.useSecrets(t)
	secrets["the server's API key"] = s.Key
	secrets["a stored API key"] = stored

	// Kill left no secret in the row or the files.
	db := filepath.Join(s.DataDir, "cubby.db")
	row := readRow(t, db, secrets["sandbox ID"])
	if row.state != "killed" || row.access != "" || row.traffic != "" || row.env != "{}" {
		t.Errorf("killed sandbox row = %+v, want no token and no env vars", row)
	}
	for what, v := range secrets {
		if what == "sandbox ID" {
			continue
		}
		for _, f := range []string{db, db + "-wal", db + "-shm"} {
			if data, _ := os.ReadFile(f); bytes.Contains(data, []byte(v)) {
				t.Errorf("%s holds %s", filepath.Base(f), what)
			}
		}
	}
	s.wantCleanLog(t, secrets)

	// An older release left the dir 0755 and the files 0644: the next start fixes them.
	s.Kill9()
	widen := map[string]os.FileMode{s.DataDir: 0o755, db: 0o644, db + "-wal": 0o644, db + "-shm": 0o644, s.LogPath: 0o644}
	for p, mode := range widen {
		if err := os.Chmod(p, mode); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	s.wantPrivate(t, "restart")
}

// wantPrivate checks the modes of the data dir, the database files and the
// server log.
func (s *server) wantPrivate(t *testing.T, when string) {
	t.Helper()
	db := filepath.Join(s.DataDir, "cubby.db")
	want := map[string]os.FileMode{s.DataDir: 0o700, db: 0o600, db + "-wal": 0o600, db + "-shm": 0o600, s.LogPath: 0o600}
	for p, mode := range want {
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", when, err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: %s is %v, want %v", when, p, st.Mode().Perm(), mode)
		}
	}
}

// useSecrets runs a sandbox that handles known secrets the way a user would
// (env vars, a traffic token, a command's env, a signed URL), kills it, and
// returns each secret by what it is, plus its "sandbox ID".
func (s *server) useSecrets(t *testing.T) map[string]string {
	t.Helper()
	envSecret, cmdSecret := "sk-env-"+testserver.RandHex(12), "sk-cmd-"+testserver.RandHex(12)
	sbx := s.createWith(t, &sdk.CreateOptions{
		Envs:    map[string]string{"OPENAI_API_KEY": envSecret},
		Network: &sdk.NetworkOptions{AllowPublicTraffic: new(false)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The secrets are in the command line too: the agent must not log it.
	res, err := sbx.Commands.Run(ctx, `[ "$OPENAI_API_KEY" = `+envSecret+` ] && [ "$CMD_SECRET" = `+cmdSecret+` ] && echo ok`,
		&sdk.CommandOptions{Envs: map[string]string{"CMD_SECRET": cmdSecret}})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("command with the secrets: %+v, %v", res, err)
	}
	if _, err := sbx.Files.Write(ctx, "report.txt", []byte("r"), nil); err != nil {
		t.Fatal(err)
	}
	signed, err := sbx.DownloadURL("report.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(signed)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("signed download: %v %v", resp, err)
	}
	resp.Body.Close()
	u, _ := url.Parse(signed)
	logs := s.sandboxLogs(t, sbx.ID())
	if err := sbx.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"an env var value": envSecret, "a command's env var value": cmdSecret,
		"the access token": sbx.AccessToken(), "the traffic token": sbx.TrafficAccessToken(),
		"a URL signature": u.Query().Get("signature"), "sandbox ID": sbx.ID(),
	}
	for what, v := range secrets {
		if v == "" {
			t.Fatalf("test setup: no %s", what)
		}
		if what != "sandbox ID" && strings.Contains(logs, v) {
			t.Errorf("the sandbox's logs hold %s", what)
		}
	}
	return secrets
}

// sandboxLogs returns GET /sandboxes/{id}/logs as text.
func (s *server) sandboxLogs(t *testing.T, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, data, err := s.Call(ctx, s.Key, "GET", "/sandboxes/"+id+"/logs", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("sandbox logs: %v %v", resp, err)
	}
	return string(data)
}

// apiKeyPattern matches an E2B API key anywhere.
var apiKeyPattern = regexp.MustCompile(`e2b_[0-9a-f]{40}`)

// wantCleanLog fails when the server log holds any of secrets (but the
// sandbox ID, which is not one) or anything shaped like an API key.
func (s *server) wantCleanLog(t *testing.T, secrets map[string]string) {
	t.Helper()
	log, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte(secrets["sandbox ID"])) {
		t.Fatalf("test setup: the server log does not mention the sandbox at all (debug level?)")
	}
	for what, v := range secrets {
		if what != "sandbox ID" && bytes.Contains(log, []byte(v)) {
			t.Errorf("the server log holds %s", what)
		}
	}
	if k := apiKeyPattern.Find(log); k != nil {
		t.Errorf("the server log holds an API key (%s…)", k[:8])
	}
}

// sandboxRow is what the database keeps of a sandbox's secrets.
type sandboxRow struct{ state, access, traffic, env string }

// readRow opens the server's database read-only and reads sandbox id's row.
func readRow(t *testing.T, path, id string) sandboxRow {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var r sandboxRow
	err = db.QueryRow(`SELECT state, access_token, traffic_token, env_vars FROM sandboxes WHERE id = ?`, id).
		Scan(&r.state, &r.access, &r.traffic, &r.env)
	if err != nil {
		t.Fatalf("read the sandbox row: %v", err)
	}
	return r
}
