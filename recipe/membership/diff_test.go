package membership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiff(t *testing.T) {
	m := func(id string, cz int64) Member { return Member{ID: id, Czxid: cz} }
	mv := func(id string, cz int64, v int32) Member { return Member{ID: id, Czxid: cz, Version: v} }
	view := func(ms ...Member) map[string]Member {
		out := map[string]Member{}
		for _, x := range ms {
			out[x.ID] = x
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		old, cur      map[string]Member
		leaves, joins []Member
		updates       []update
	}{
		{"nothing", view(), view(), nil, nil, nil},
		{"first view", view(), view(m("b", 2), m("a", 1)), nil, []Member{m("a", 1), m("b", 2)}, nil},
		{"a leaves", view(m("a", 1), m("b", 2)), view(m("b", 2)), []Member{m("a", 1)}, nil, nil},
		{"same", view(m("a", 1)), view(m("a", 1)), nil, nil, nil},
		{"re-created between listings", view(m("a", 1), m("b", 2)), view(m("a", 5), m("b", 2)), []Member{m("a", 1)}, []Member{m("a", 5)}, nil},
		{"turnover", view(m("a", 1)), view(m("c", 3)), []Member{m("a", 1)}, []Member{m("c", 3)}, nil},
		{"updates in id order", view(mv("b", 2, 0), mv("a", 1, 3), m("c", 4)), view(mv("b", 2, 1), mv("a", 1, 5), m("c", 4)), nil, nil,
			[]update{{mv("a", 1, 3), mv("a", 1, 5)}, {mv("b", 2, 0), mv("b", 2, 1)}}},
		{"re-created with another version: leave and join, no update", view(mv("a", 1, 3)), view(mv("a", 7, 0)),
			[]Member{mv("a", 1, 3)}, []Member{mv("a", 7, 0)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaves, joins, updates := diff(tc.old, tc.cur)
			require.Equal(t, tc.leaves, leaves)
			require.Equal(t, tc.joins, joins)
			require.Equal(t, tc.updates, updates)
		})
	}
}
