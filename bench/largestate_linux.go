package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// freeBytes is the space available to this user on dir's file system.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// dropFileCache asks the kernel to drop f's clean pages from the page
// cache (posix_fadvise DONTNEED), so that a read after it comes from the
// disk. It affects this file only. Reports whether the call succeeded.
func dropFileCache(f *os.File) bool {
	const fadvDontNeed = 4
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0)
	return errno == 0
}

// rssBytes is this process's resident set size (VmRSS), 0 if unknown.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
