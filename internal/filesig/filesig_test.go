package filesig

import "testing"

func TestSignShape(t *testing.T) {
	a := Sign("/home/user/a.txt", OpRead, "", "tok", 0)
	b := Sign("/home/user/a.txt", OpRead, "", "tok", 1700000000)
	if a == b || len(a) != 3+43 || a[:3] != "v1_" {
		t.Fatalf("unexpected signatures %q %q", a, b)
	}
	if !Valid(b, "/home/user/a.txt", OpRead, "", "tok", 1700000000) {
		t.Fatal("own signature not valid")
	}
	if Valid(b, "/home/user/a.txt", OpWrite, "", "tok", 1700000000) {
		t.Fatal("operation not bound")
	}
}
