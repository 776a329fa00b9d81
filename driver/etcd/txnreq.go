package etcd

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The parts of a transaction built as a request (conn.txn), for the
// requests of every cycle: what clientv3's builder would send, without
// its copies.

// cmpCreate compares the create revision of key (of every key in [key,
// end) when end is set; an empty range compares as revision 0).
func cmpCreate(key, end string, result pb.Compare_CompareResult, rev int64) *pb.Compare {
	c := &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: result, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
	if end != "" {
		c.RangeEnd = []byte(end)
	}
	return c
}

// cmpMod compares key's mod revision as equal to rev.
func cmpMod(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// cmpLease compares the lease key is attached to.
func cmpLease(key string, lease int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Lease{Lease: lease}}
}

// cmpValueLess compares key's value, bytewise, as below v (false when key
// is absent).
func cmpValueLess(key, v string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

func opPut(key, value string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease}}}
}

func opGet(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

// opQueue reads the queue q (every key under it) by create revision, up
// to revision maxCreate when it is set.
func opQueue(q string, maxCreate int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte(q), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(q)),
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, MaxCreateRevision: maxCreate,
	}}}
}

func opDelete(key string, prevKV bool) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), PrevKv: prevKV}}}
}
