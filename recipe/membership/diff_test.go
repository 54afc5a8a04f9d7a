package membership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiff(t *testing.T) {
	m := func(id string, cz int64) Member { return Member{ID: id, Czxid: cz} }
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
	}{
		{"nothing", view(), view(), nil, nil},
		{"first view", view(), view(m("b", 2), m("a", 1)), nil, []Member{m("a", 1), m("b", 2)}},
		{"a leaves", view(m("a", 1), m("b", 2)), view(m("b", 2)), []Member{m("a", 1)}, nil},
		{"same", view(m("a", 1)), view(m("a", 1)), nil, nil},
		{"re-created between listings", view(m("a", 1), m("b", 2)), view(m("a", 5), m("b", 2)), []Member{m("a", 1)}, []Member{m("a", 5)}},
		{"turnover", view(m("a", 1)), view(m("c", 3)), []Member{m("a", 1)}, []Member{m("c", 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaves, joins := diff(tc.old, tc.cur)
			require.Equal(t, tc.leaves, leaves)
			require.Equal(t, tc.joins, joins)
		})
	}
}
