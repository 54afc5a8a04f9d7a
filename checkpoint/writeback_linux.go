package checkpoint

import (
	"os"
	"syscall"
)

// startWriteback asks the kernel to start writing f's bytes [off, off+n)
// to disk now, without waiting (sync_file_range SYNC_FILE_RANGE_WRITE):
// the disk works while the network delivers, and the file's fsync later
// finds little left to do. It is a hint: errors are ignored, and it makes
// nothing durable (the fsync does).
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	const syncFileRangeWrite = 2
	rc.Control(func(fd uintptr) {
		syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	})
}
