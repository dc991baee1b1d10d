// Command sysprobe makes raw system calls, with no libc in between, and prints
// "<label> <OK|EPERM|ENOSYS|errno N>" for each. The security tests build it for
// GOARCH=386 to reach the kernel through the i386 ABI (int 0x80).
//
// Each argument is label=nr[,arg...] (numbers in Go syntax). The label
// "socketcall-socket" is special: its one number is an address family, and the
// call made is socketcall(SYS_SOCKET, {family, SOCK_STREAM, 0}) (i386 only).
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// socketcallNr and sysSocket are i386's multiplexed socket call and its
// "socket" sub-call (linux/net.h).
const (
	socketcallNr = 102
	sysSocket    = 1
)

func main() {
	for _, a := range os.Args[1:] {
		label, spec, _ := strings.Cut(a, "=")
		var v []uintptr
		for _, s := range strings.Split(spec, ",") {
			n, err := strconv.ParseUint(s, 0, 64)
			if err != nil {
				fmt.Println(label, "BADARG")
				os.Exit(2)
			}
			v = append(v, uintptr(n))
		}
		var sockArgs [3]uint32
		if label == "socketcall-socket" {
			sockArgs = [3]uint32{uint32(v[0]), uint32(syscall.SOCK_STREAM), 0}
			v = []uintptr{socketcallNr, sysSocket, uintptr(unsafe.Pointer(&sockArgs[0]))}
		}
		for len(v) < 7 {
			v = append(v, 0)
		}
		_, _, e := syscall.RawSyscall6(v[0], v[1], v[2], v[3], v[4], v[5], v[6])
		fmt.Println(label, errName(e))
	}
}

func errName(e syscall.Errno) string {
	switch e {
	case 0:
		return "OK"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOSYS:
		return "ENOSYS"
	}
	return "errno " + strconv.Itoa(int(e))
}
