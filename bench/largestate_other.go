//go:build !linux

package main

import (
	"errors"
	"os"
)

// freeBytes is not known on this OS.
func freeBytes(string) (int64, error) { return 0, errors.New("free space unknown on this OS") }

// dropFileCache is not available on this OS: reads after it may be cached.
func dropFileCache(*os.File) bool { return false }

// rssBytes is not known on this OS.
func rssBytes() int64 { return 0 }
