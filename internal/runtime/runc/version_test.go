package runc

import "testing"

func TestEscapeFixed(t *testing.T) {
	for out, want := range map[string]bool{
		"runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev": false,
		"runc version 1.2.7\n":  false,
		"runc version 1.2.8\n":  true,
		"runc version 1.3.2":    false,
		"runc version 1.3.3":    true,
		"runc version 1.4.0":    true,
		"runc version 1.5.2":    true,
		"runc version 1.10.0":   true,
		"runc version 2.0.0":    true,
		"runc version 0.9.9":    false,
		"runc version 1.4.0-rc": true,
	} {
		got, err := EscapeFixed(out)
		if err != nil || got != want {
			t.Errorf("EscapeFixed(%q) = %v, %v; want %v", out, got, err, want)
		}
	}
	for _, bad := range []string{"", "crun version 1.14", "runc version x.y"} {
		if _, err := EscapeFixed(bad); err == nil {
			t.Errorf("EscapeFixed(%q) accepted", bad)
		}
	}
}
