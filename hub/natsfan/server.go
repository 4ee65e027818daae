package natsfan

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartServer starts a NATS server with JetStream in this process,
// storing in storeDir, listening on listen (host:port; "" listens
// nowhere: only this process connects, through nats.InProcessServer) so
// that relay hubs on other machines can attach to it. Shut it down with
// Shutdown and WaitForShutdown.
func StartServer(listen, storeDir string) (*server.Server, error) {
	o := &server.Options{
		ServerName: "tensorpress",
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if listen == "" {
		o.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("natsfan: listen address %q: %w", listen, err)
		}
		if o.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("natsfan: listen address %q: %w", listen, err)
		}
		if o.Port == 0 {
			o.Port = server.RANDOM_PORT
		}
		o.Host = host
	}
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("natsfan: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("natsfan: the embedded NATS server did not start")
	}
	return s, nil
}
