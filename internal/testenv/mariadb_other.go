//go:build !linux

package testenv

import "syscall"

func serverProcAttr() *syscall.SysProcAttr { return nil }
