//go:build !linux

package autotune

import "net"

// UseTCPInfo reports false: TCP_INFO is read on Linux only.
func (l *Link) UseTCPInfo(c net.Conn) bool { return false }
