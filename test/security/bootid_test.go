package security

import (
	"os"
	"strings"
	"testing"
)

// TestBootIDIsTheSandboxs: the boot ID a sandbox sees is its own, not the
// host's (a value shared by every sandbox of the host and stable across them,
// which lets sandboxes of different users recognise that they share a host),
// and root inside cannot replace or unmount it.
func TestBootIDIsTheSandboxs(t *testing.T) {
	s := startServer(t)
	a := s.create(t, "")
	b := s.create(t, "")
	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	idA := strings.TrimSpace(asRoot(t, a, "cat /proc/sys/kernel/random/boot_id").Out)
	idB := strings.TrimSpace(asRoot(t, b, "cat /proc/sys/kernel/random/boot_id").Out)
	if idA == strings.TrimSpace(string(host)) || idB == strings.TrimSpace(string(host)) {
		t.Fatalf("a sandbox sees the host's boot_id %s", host)
	}
	if len(idA) != 36 || idA == idB {
		t.Fatalf("boot ids %q and %q: want two distinct UUIDs", idA, idB)
	}
	for _, attack := range []string{
		"echo 00000000-0000-4000-8000-000000000000 > /proc/sys/kernel/random/boot_id",
		"umount /proc/sys/kernel/random/boot_id",
		"umount -l /proc/sys/kernel/random/boot_id",
		"mount -o remount,rw /proc/sys/kernel/random/boot_id",
	} {
		asRoot(t, a, attack)
		if got := strings.TrimSpace(asRoot(t, a, "cat /proc/sys/kernel/random/boot_id").Out); got != idA {
			t.Fatalf("after %q as root the boot_id is %q, was %q", attack, got, idA)
		}
	}
	s.healthy(t)
}
