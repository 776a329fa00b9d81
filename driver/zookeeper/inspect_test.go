package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"
)

// Dump lists the key node and its children, after a sync, each with its
// data and the versions and zxids that any change to it moves.
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	kp := h.kp(key)
	if _, err := h.raw.Sync(kp); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	out := []string{}
	node := func(path string) error {
		data, st, err := h.raw.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %q czxid=%d mzxid=%d pzxid=%d version=%d cversion=%d children=%d owner=%x",
			path, data, st.Czxid, st.Mzxid, st.Pzxid, st.Version, st.Cversion, st.NumChildren, st.EphemeralOwner))
		return nil
	}
	if err := node(kp); err != nil {
		return nil, err
	}
	children, _, err := h.raw.Children(kp)
	if errors.Is(err, zk.ErrNoNode) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(children)
	for _, c := range children {
		if err := node(kp + "/" + c); err != nil {
			return nil, err
		}
	}
	return out, nil
}
