package testenv

import "syscall"

// serverProcAttr makes a server die with the test binary, even when go test
// kills it at its timeout and no cleanup runs.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
