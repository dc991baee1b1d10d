package agentapi

import (
	"slices"
	"testing"
)

func TestBootOptionsArgs(t *testing.T) {
	for _, c := range []struct {
		o    BootOptions
		want []string
	}{
		{BootOptions{}, nil},
		{BootOptions{DefaultContexts: []string{"python", "r"}}, []string{"--default-contexts=python,r"}},
		{BootOptions{DefaultContexts: []string{}, PythonPreload: []string{}}, []string{"--default-contexts=", "--python-preload="}},
	} {
		if got := c.o.Args(); !slices.Equal(got, c.want) {
			t.Errorf("Args(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
	if (BootOptions{}).Key() == (BootOptions{PythonPreload: []string{}}).Key() {
		t.Error("default and empty preload share a key")
	}
}

func TestLinkToken(t *testing.T) {
	a, b := LinkToken("token-a"), LinkToken("token-b")
	if len(a) != 64 || a == b || a == "token-a" || LinkToken("token-a") != a {
		t.Fatalf("LinkToken: %q %q", a, b)
	}
	if LinkToken("") != "" {
		t.Fatal("an unsecured sandbox got a link credential")
	}
}
