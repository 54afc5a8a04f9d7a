package logroom

import (
	"context"
	"log/slog"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// The pinned cross-package API (contracts.md): this only compiles while
// every listed signature still holds.
var (
	_ func(context.Context, DialConfig) (*Client, error)                 = Dial
	_ func(*Client) *zk.Conn                                             = (*Client).Conn
	_ func(*Client) []zk.ACL                                             = (*Client).ACL
	_ func(*Client) zk.State                                             = (*Client).State
	_ func(*Client) int64                                                = (*Client).SessionID
	_ func(*Client) (<-chan zk.Event, func())                            = (*Client).Subscribe
	_ func(*Client)                                                      = (*Client).Close
	_ func(string) error                                                 = ValidateName
	_ func(string) error                                                 = ValidateBase
	_ func(context.Context, *Client, string, RoomOptions) (*Room, error) = OpenRoom
	_ func(*Room) string                                                 = (*Room).Name
	_ func(*Room, ...string) string                                      = (*Room).Path
	_ func(*Room) *Client                                                = (*Room).Client
	_ func(*Room, context.Context) (uint64, error)                       = (*Room).Epoch
	_ func(*Room, context.Context) ([]ChannelInfo, error)                = (*Room).Channels
	_ func(*Room, context.Context, uint64) error                         = (*Room).DeleteChannel
	_ func(*Room, context.Context) (int64, error)                        = (*Room).Bytes
	_ func(*Room, context.Context, uint64) (uint64, error)               = (*Room).CommittedIndex
	_ func(WriterConfig) error                                           = WriterConfig.Validate
	_ func(*Room, context.Context, WriterConfig) (*Writer, error)        = (*Room).NewWriter
	_ func(*Writer) uint64                                               = (*Writer).Epoch
	_ func(*Writer) uint64                                               = (*Writer).StartIndex
	_ func(*Writer, context.Context, ...[]byte) (uint64, error)          = (*Writer).Append
	_ func(*Writer, context.Context) (ChannelInfo, error)                = (*Writer).Rotate
	_ func(*Writer) uint64                                               = (*Writer).LastCommitted
	_ func(*Writer) error                                                = (*Writer).Close
	_ func(*Room, context.Context, uint64) (*Reader, error)              = (*Room).Tail
	_ func(*Reader, context.Context) ([]Entry, error)                    = (*Reader).Next
	_ func(*Reader) uint64                                               = (*Reader).Position
	_ func(*Reader) error                                                = (*Reader).Close
	_ func(uint64, uint64, [][]byte) ([]byte, error)                     = EncodeBatch
	_ func([]byte) (Batch, error)                                        = DecodeBatch
	_                                                                    = []error{ErrFenced, ErrOutcomeUnknown, ErrCorrupt, ErrCompacted, ErrEntryTooLarge, ErrRoomFull, ErrBadName, ErrClosed, ErrChannelOpen, ErrNoRoom}
	_                                                                    = DialConfig{Servers: nil, SessionTimeout: time.Second, Auth: &Digest{User: "", Password: ""}, Logger: (*slog.Logger)(nil)}
	_                                                                    = RoomOptions{Base: "", Logger: nil}
	_                                                                    = ChannelInfo{Num: 0, FirstIndex: 0, LastIndex: 0, Epoch: 0, Sealed: false, Bytes: int64(0), Batches: int(0)}
	_                                                                    = Entry{Index: 0, Epoch: 0, Data: nil}
	_                                                                    = Batch{Version: 0, Epoch: 0, First: 0, Count: 0, Entries: nil}
	_                                                                    = WriterConfig{Owner: "", MaxBatchBytes: 0, Linger: time.Duration(0), MaxInFlight: 0, MaxQueuedBytes: 0, MaxChannelBatches: 0, MaxChannelBytes: int64(0), MaxRoomBytes: int64(0), OnCommit: func([]Entry) {}, Logger: nil}
)
