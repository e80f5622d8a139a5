"""Leave a consumer group the way a rollout sometimes does on tansu: its leader gone mid-round.

``strand_group`` joins ``group`` as a new member (the coordinator elects it leader of the forming
group) and sends ``LeaveGroup`` before its ``SyncGroup``, as a replica SIGTERMed in the seconds
after another one joined does. tansu removes the member but keeps it as the leader, so the group
never forms again (rule B5, ``conduit.runtime.grouprescue``). Used by tests/stack/test_group_rescue.py.
"""

from __future__ import annotations

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.protocol.group import LeaveGroupRequest

from conduit.runtime.grouprescue import join_group


async def strand_group(bootstrap: str, group: str, topics: list[str]) -> str:
    """Join ``group`` (subscribed to ``topics``) as its leader, then leave without syncing.

    Returns the departed leader's member id. Raises AssertionError if the coordinator did not
    elect this member (the group already had a live leader: use a fresh group id).
    """
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        protocols = [(RoundRobinPartitionAssignor.name, RoundRobinPartitionAssignor.metadata(set(topics)).encode())]
        joined = await join_group(client, node, group, "", protocols, 6_000, 10_000)
        assert joined.error_code == 0 and joined.leader_id == joined.member_id, joined
        await client.send(node, LeaveGroupRequest(group, joined.member_id))
        return joined.member_id
    finally:
        await client.close()
