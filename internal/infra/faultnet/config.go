package faultnet

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Defaults for zero Config fields.
const (
	DefaultListen      = "127.0.0.1:0"
	DefaultDialTimeout = 2 * time.Second
)

var (
	// ErrInvalidConfig: Config.Validate found bad fields (one wrapped error
	// per field).
	ErrInvalidConfig = errors.New("faultnet: invalid config")
	// ErrUnknownLink: a Net was asked about a link name it does not hold.
	ErrUnknownLink = errors.New("faultnet: unknown link")
	// ErrDuplicateLink: Net.Add was given a name it already holds.
	ErrDuplicateLink = errors.New("faultnet: duplicate link")
	// ErrClosed: Net.Add after Net.Close.
	ErrClosed = errors.New("faultnet: closed")
)

// Config configures a Proxy. Zero values take the documented defaults;
// Validate names every bad field at once.
type Config struct {
	// Listen is the address the proxy listens on. Default "127.0.0.1:0"
	// (a free port; Addr says which).
	Listen string
	// Targets are the addresses ("host:port") connections are forwarded
	// to: each accepted connection dials the next one, in round robin.
	// Required.
	Targets []string
	// DialTimeout bounds each dial of a target; a connection whose dial
	// fails is reset (Stats.DialFailed). Default 2s.
	DialTimeout time.Duration
	// Seed seeds the proxy's jitter source (Delay). Net.Add derives it from
	// the Net's seed and the link's name instead.
	Seed uint64
}

// Validate reports every bad field, each as an error wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			bad("Listen", "%q is not host:port: %v", c.Listen, err)
		}
	}
	if len(c.Targets) == 0 {
		bad("Targets", "at least one target address is required")
	}
	for i, t := range c.Targets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			bad(fmt.Sprintf("Targets[%d]", i), "%q is not host:port: %v", t, err)
		}
	}
	if c.DialTimeout < 0 {
		bad("DialTimeout", "%v is negative", c.DialTimeout)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	c.Targets = append([]string(nil), c.Targets...)
	return c
}
