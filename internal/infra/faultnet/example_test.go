package faultnet_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

func Example() {
	// A server to put behind the proxy: it echoes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()

	p, err := faultnet.New(faultnet.Config{Targets: []string{ln.Addr().String()}})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	echo := func(c net.Conn, msg string) (string, error) {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(echo(c, "ping"))

	p.Cut()
	_, err = echo(c, "lost")
	fmt.Println("after Cut, reset:", errors.Is(err, syscall.ECONNRESET))

	p.Heal()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c2.Close()
	fmt.Println(echo(c2, "pong"))
	fmt.Println("resets:", p.Stats().Resets)
	// Output:
	// ping <nil>
	// after Cut, reset: true
	// pong <nil>
	// resets: 1
}
