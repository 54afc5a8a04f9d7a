package replica

import (
	"log/slog"

	"github.com/roomlog/roomlog/logroom"
)

// zkDialConfig is the logroom.DialConfig of every ZooKeeper session this
// member opens (its own, the lost-room probe's, a re-seed's): the same
// servers, credentials, TLS and ACL.
func (c Config) zkDialConfig(log *slog.Logger, anyServer bool) logroom.DialConfig {
	d := logroom.DialConfig{
		Servers:        c.Servers,
		SessionTimeout: c.SessionTimeout,
		Auth:           c.Auth,
		Logger:         log,
		AnyServer:      anyServer,
		TLSServerName:  c.ZooKeeperTLSServerName,
		ACLIdentities:  c.ACLIdentities,
	}
	if c.ZooKeeperTLS != nil { // a nil *Source in the interface would not be nil
		d.TLS = c.ZooKeeperTLS
	}
	return d
}
