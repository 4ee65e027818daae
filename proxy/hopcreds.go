package proxy

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// DialOptions returns the options that a local proxy's connection to the
// remote one needs for h to know each call's connection exactly, whatever
// the number of connections gRPC keeps: creds (the connection's transport
// security, insecure.NewCredentials() for none) wrapped to tell h which of
// its connections a call took, and the rate measured on that connection
// in the call's metadata. Its dialer must still wrap each connection with
// Conn. Without them, a call announces the rate of the connection made
// last.
func (h *Hop) DialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	h.mu.Lock()
	h.perCall = true
	h.mu.Unlock()
	return []grpc.DialOption{
		grpc.WithTransportCredentials(hopCreds{creds}),
		grpc.WithPerRPCCredentials(rateCreds{h}),
	}
}

// hopCreds are transport credentials whose AuthInfo carries the hop's
// connection (hopInfo).
type hopCreds struct {
	credentials.TransportCredentials
}

func (c hopCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if hc, ok := raw.(*hopConn); ok && err == nil {
		ai = hopInfo{ai, hc}
	}
	return conn, ai, err
}

func (c hopCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if hc, ok := raw.(*hopConn); ok && err == nil {
		ai = hopInfo{ai, hc}
	}
	return conn, ai, err
}

func (c hopCreds) Clone() credentials.TransportCredentials {
	return hopCreds{c.TransportCredentials.Clone()}
}

// hopInfo is the AuthInfo of a hop's connection: its transport's, and the
// connection.
type hopInfo struct {
	credentials.AuthInfo
	hc *hopConn
}

// GetCommonAuthInfo passes the transport's security level on, for gRPC's
// checks of per-call credentials (none: no level, which passes).
func (i hopInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	if c, ok := i.AuthInfo.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}); ok {
		return c.GetCommonAuthInfo()
	}
	return credentials.CommonAuthInfo{}
}

// connOf returns the hop's connection that authInfo names, nil if none.
func connOf(authInfo credentials.AuthInfo) *hopConn {
	if i, ok := authInfo.(hopInfo); ok {
		return i.hc
	}
	return nil
}

// rateCreds put into each call's metadata the rate measured on the
// connection the call took.
type rateCreds struct{ h *Hop }

func (r rateCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if rate := r.h.rateFor(connOf(ri.AuthInfo)); rate != "" {
		return map[string]string{rateKey: rate}, nil
	}
	return nil, nil
}

func (rateCreds) RequireTransportSecurity() bool { return false }

// callConn returns the hop's connection of a call's peer: the one its
// AuthInfo names, else the one at its two ends' addresses, else nil.
func (h *Hop) callConn(p *peer.Peer) *hopConn {
	if p == nil {
		return nil
	}
	if hc := connOf(p.AuthInfo); hc != nil {
		return hc
	}
	return h.conn(p)
}
