package users

import (
	"encoding/base64"
	"net/http"
	"testing"
)

func TestResolve(t *testing.T) {
	u := &User{Name: "user", Home: "/home/user"}
	cases := []struct{ in, workdir, want string }{
		{"", "/srv", "/srv"},
		{"", "", "/home/user"},
		{"~", "", "/home/user"},
		{"~/a/b", "", "/home/user/a/b"},
		{"a.txt", "/srv", "/home/user/a.txt"},
		{"/etc/../tmp/x", "", "/tmp/x"},
		{"../x", "", "/home/x"},
	}
	for _, c := range cases {
		if got := u.Resolve(c.in, c.workdir); got != c.want {
			t.Errorf("Resolve(%q, %q) = %q, want %q", c.in, c.workdir, got, c.want)
		}
	}
}

func TestFromBasicAuth(t *testing.T) {
	h := http.Header{}
	if _, ok, err := FromBasicAuth(h); ok || err != nil {
		t.Fatalf("empty header: ok=%v err=%v", ok, err)
	}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	name, ok, err := FromBasicAuth(h)
	if err != nil || !ok || name != "root" {
		t.Fatalf("got %q %v %v", name, ok, err)
	}
	h.Set("Authorization", "Basic !!!")
	if _, _, err := FromBasicAuth(h); err == nil {
		t.Fatal("want error for bad base64")
	}
}

func TestLookupRoot(t *testing.T) {
	u, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != 0 || u.Home == "" {
		t.Fatalf("root = %+v", u)
	}
	if _, err := Lookup("no-such-user-cubby"); err == nil {
		t.Fatal("want error")
	}
}
