"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance and
session timers, and what DescribeGroups reports of a group's members (Kafka's
GroupCoordinator without its offset half; the semantics and where they depart from Kafka are
listed in :mod:`broker.groups.coordinator`).

The state machine is synchronous: each ``handle_*`` method takes a callback that receives the
answer, possibly later (when a rebalance completes, a timer fires or the group metadata is
committed). Timers are armed on the coordinator's :class:`broker.groups.timers.TimerQueue`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from minikafka.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from minikafka.broker.groups.store import GROUP_STORE_ERRORS
from minikafka.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The answer to a JoinGroup; ``members`` (member id, metadata) only for the leader."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol: str = ""
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()   # member id, group.instance.id, metadata
    protocol_type: str | None = None


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """What DescribeGroups reports for one group."""

    error: ErrorCode
    group_id: str
    state: str = GroupState.DEAD.value
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberSummary, ...] = ()

class GroupMembership:
    """The members, generations and rebalances of the groups in ``ownership``'s partitions;
    a completed generation's metadata is stored by ``store`` before it is handed out."""

    def __init__(self, config, clock, timers, ownership, store) -> None:
        self.config = config
        self.clock = clock
        self.timers = timers
        self.ownership = ownership
        self.store = store

    # ================================================================ JoinGroup

    def handle_join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]],
                          respond: Callable[[JoinResult], None], *,
                          group_instance_id: str | None = None,
                          require_known_member_id: bool = False) -> None:
        """Kafka 2.8's doJoinGroup. ``group_instance_id`` makes the member static (KIP-345);
        ``require_known_member_id`` (JoinGroup v4+ without one, KIP-394) answers a member
        without an id MEMBER_ID_REQUIRED with the id to join with."""
        error = self.ownership.check(group_id)
        if error:
            respond(JoinResult(error, member_id))
            return
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            respond(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return
        group = self.ownership.group(group_id)
        if group is None:
            if member_id:
                respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self.ownership.add_group(group_id)
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        if group.is_(GroupState.DEAD):
            # Removed while this request was on its way: the client starts over.
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        elif (not protocol_type or not protocols
              or (not group.is_(GroupState.EMPTY)
                  and (group.protocol_type != protocol_type
                       or not group.supports_protocols(name for name, _ in protocols)))):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        elif not member_id:
            new_member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            static = group.static_member(group_instance_id)
            if static is not None:
                self._replace_static_member(group, static, new_member_id, protocols, respond)
            elif require_known_member_id:
                self._add_pending_member(group, new_member_id, session_timeout_ms)
                respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_member_id))
            else:
                self._add_member_and_rebalance(group, new_member_id, group_instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                               protocols, respond)
        elif member_id in group.pending_members and group_instance_id is None:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                           protocols, respond)
        elif group.is_static_member_fenced(member_id, group_instance_id):
            respond(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
        elif member_id not in group.members or (
                group_instance_id is not None and group_instance_id not in group.static_members):
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        else:
            member = group.members[member_id]
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._update_member_and_rebalance(group, member, protocols, respond)
            elif group.is_(GroupState.COMPLETING_REBALANCE):
                if member.matches(protocols):
                    # A retry of a join whose answer was lost: answer it again.
                    respond(self._join_result(group, member))
                else:
                    self._update_member_and_rebalance(group, member, protocols, respond)
            elif member_id == group.leader_id or not member.matches(protocols):
                # The leader rejoining (e.g. its subscription's topics changed) or a member
                # with new metadata: everyone needs a new assignment.
                self._update_member_and_rebalance(group, member, protocols, respond)
            else:
                # A follower rejoining with unchanged metadata keeps the current generation.
                respond(JoinResult(ErrorCode.NONE, member_id, group.generation_id,
                                   group.protocol or "", group.leader_id or "",
                                   protocol_type=group.protocol_type))
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol))
                            for m in group.members.values())
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol or "",
                          group.leader_id or "", members, group.protocol_type)

    def _add_member_and_rebalance(self, group, member_id, group_instance_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                  respond) -> None:
        member = MemberMetadata(member_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                join_callback=respond, group_instance_id=group_instance_id)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group)

    def _add_pending_member(self, group: GroupMetadata, member_id: str, session_timeout_ms: int) -> None:
        """Kafka's addPendingMember with its expiration: an id handed out with MEMBER_ID_REQUIRED
        holds up the rebalance until it is used or its session timeout runs out."""

        def expire() -> None:
            if group.pending_members.pop(member_id, False) is not False:
                logger.info("group %s: pending member %s did not join in time", group.group_id, member_id)
                self._try_complete_join(group)

        group.pending_members[member_id] = self.timers.schedule(self.clock.time_ms() + session_timeout_ms, expire)

    def _replace_static_member(self, group: GroupMetadata, member: MemberMetadata, new_member_id: str,
                               protocols: list[tuple[str, bytes]], respond) -> None:
        """Kafka 2.8's updateStaticMemberAndRebalance: a static member joining again without its
        member id (a restarted consumer) takes over the member under a new id. A request of the
        previous incarnation still waiting is fenced. In a Stable group whose protocol it does
        not change it keeps its assignment without a rebalance: the group is stored with the
        new id and the answer names the current leader, so that the member does not assign
        (a Stable group would not hand out a new assignment)."""
        old_member_id = member.member_id
        current_leader = group.leader_id or ""
        self._release(member, ErrorCode.FENCED_INSTANCE_ID)
        group.replace_static_member(member, new_member_id)
        self.schedule_heartbeat(group, member, self.clock.time_ms())
        old_protocols = member.protocols
        member.protocols = protocols
        if group.is_(GroupState.STABLE):
            if group.select_protocol() != group.protocol:
                self._update_member_and_rebalance(group, member, protocols, respond)
                return
            generation = group.generation_id

            def stored(error: ErrorCode) -> None:
                if error:
                    logger.warning("group %s: storing static member %s's new id failed: %s",
                                   group.group_id, new_member_id, error.name)
                    if group.members.get(new_member_id) is member:
                        member.protocols = old_protocols
                        group.replace_static_member(member, old_member_id)
                        self.schedule_heartbeat(group, member, self.clock.time_ms())
                    respond(JoinResult(error, new_member_id))
                else:
                    respond(JoinResult(ErrorCode.NONE, new_member_id, generation, group.protocol or "",
                                       current_leader, protocol_type=group.protocol_type))

            error, write = self.store.store_group(group, GROUP_STORE_ERRORS)
            if error:
                stored(error)
            else:
                self.store.when_committed(write, GROUP_STORE_ERRORS, stored)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, respond)
        else:  # PreparingRebalance: the rebalance under way answers it
            member.join_callback = respond

    def _update_member_and_rebalance(self, group, member, protocols, respond) -> None:
        member.protocols = protocols
        member.join_callback = respond
        self._maybe_prepare_rebalance(group)

    def _maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        first_rebalance = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        group.rebalance_epoch += 1
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        epoch = group.rebalance_epoch
        now = self.clock.time_ms()
        delay = self.config.initial_rebalance_delay_ms
        if first_rebalance and delay > 0:
            # Kafka's InitialDelayedJoin: wait for more members, in steps of the delay, while
            # new ones keep arriving, for at most the rebalance timeout.
            group.new_member_added = False
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.rebalance_timer = self.timers.schedule(
                now + delay, lambda: self._on_initial_delay(group, epoch, remaining))
            group.initial_delay_pending = True
        else:
            group.initial_delay_pending = False
            group.rebalance_timer = self.timers.schedule(
                now + group.rebalance_timeout_ms(), lambda: self._on_rebalance_deadline(group, epoch))
        logger.info("group %s: preparing to rebalance (generation %d, %d member(s))",
                    group.group_id, group.generation_id, len(group.members))
        self._try_complete_join(group)

    def _on_initial_delay(self, group: GroupMetadata, epoch: int, remaining: int) -> None:
        if group.rebalance_epoch != epoch or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining:
            group.new_member_added = False
            step = min(self.config.initial_rebalance_delay_ms, remaining)
            left = max(remaining - self.config.initial_rebalance_delay_ms, 0)
            group.rebalance_timer = self.timers.schedule(
                self.clock.time_ms() + step, lambda: self._on_initial_delay(group, epoch, left))
            return
        group.initial_delay_pending = False
        self._complete_join(group)

    def _on_rebalance_deadline(self, group: GroupMetadata, epoch: int) -> None:
        if group.rebalance_epoch == epoch and group.is_(GroupState.PREPARING_REBALANCE):
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay_pending
                and group.all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        # As Kafka 2.8, a static member that did not rejoin stays (its session timeout
        # decides): a restarting consumer keeps its place.
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                logger.info("group %s: removing member %s, which did not rejoin in time",
                            group.group_id, member.member_id)
                self._remove_member(group, member)
        if group.is_(GroupState.DEAD):
            return
        if group.leader_id in group.members and group.members[group.leader_id].join_callback is None:
            # Kafka's maybeElectNewJoinedLeader: the leader must be one who is answered now.
            group.leader_id = next((m.member_id for m in group.members.values() if m.join_callback), group.leader_id)
        group.generation_id += 1
        group.rebalance_epoch += 1
        if group.members:
            group.protocol = group.select_protocol()
            group.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            group.protocol = None
            group.transition_to(GroupState.EMPTY)
        logger.info("group %s: generation %d with %d member(s), protocol %s, leader %s",
                    group.group_id, group.generation_id, len(group.members), group.protocol,
                    group.leader_id)
        if group.is_(GroupState.EMPTY):
            error, _ = self.store.store_group(group, GROUP_STORE_ERRORS)
            if error:
                logger.warning("group %s: storing the empty group failed: %s", group.group_id, error.name)
            return
        now = self.clock.time_ms()
        for member in list(group.members.values()):
            callback = member.join_callback
            if callback is None:
                continue
            member.join_callback = None
            self.schedule_heartbeat(group, member, now)
            callback(self._join_result(group, member))

    # ================================================================ SyncGroup

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          assignments: dict[str, bytes],
                          respond: Callable[[SyncResult], None], *,
                          group_instance_id: str | None = None, protocol_type: str | None = None,
                          protocol: str | None = None) -> None:
        """Kafka 2.8's doSyncGroup; ``protocol_type`` and ``protocol`` (SyncGroup v5), when
        given, must be the group's."""
        error = self.ownership.check(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # As Kafka: the rebalance's state is lost with the old coordinator, so the member
            # rejoins; older clients do not expect the load error from SyncGroup.
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error:
            respond(SyncResult(error))
            return
        group = self.ownership.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and group.is_static_member_fenced(member_id, group_instance_id):
            respond(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        elif member is None:
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif generation_id != group.generation_id:
            respond(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        elif (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol is not None and protocol != group.protocol):
            respond(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif group.state in (GroupState.EMPTY, GroupState.DEAD):
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(GroupState.STABLE):
            self.schedule_heartbeat(group, member, self.clock.time_ms())
            respond(SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol))
        else:
            member.sync_callback = respond
            if member_id == group.leader_id:
                for each in group.members.values():
                    each.assignment = bytes(assignments.get(each.member_id, b""))
                generation = group.generation_id
                error, write = self.store.store_group(group, GROUP_STORE_ERRORS)
                if error:
                    self._group_stored(group, generation, error)
                else:
                    # As Kafka's storeGroup (acks -1): the assignment is handed out only once
                    # the group metadata is replicated. A coordinator cut off from its
                    # followers (and ZooKeeper) cannot complete a generation that a new
                    # coordinator completes as well.
                    self.store.when_committed(write, GROUP_STORE_ERRORS,
                                         lambda error: self._group_stored(group, generation, error))

    def _group_stored(self, group: GroupMetadata, generation: int, error: ErrorCode) -> None:
        # A member may have joined or left meanwhile: only the generation that was stored completes.
        if not group.is_(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if error:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group)
        else:
            group.transition_to(GroupState.STABLE)
            self._propagate_assignment(group, ErrorCode.NONE)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        now = self.clock.time_ms()
        for member in list(group.members.values()):
            callback = member.sync_callback
            if callback is None:
                continue
            member.sync_callback = None
            # Kafka re-arms the session only on success: a member told to rejoin must do so
            # within its session or be removed.
            if not error:
                self.schedule_heartbeat(group, member, now)
            callback(SyncResult(error, member.assignment, group.protocol_type, group.protocol))

    # ================================================================ Heartbeat / LeaveGroup

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        error = self.ownership.check(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka answers "blindly" while the group loads: the load re-arms every member's
            # session, and clients (aiokafka's heartbeat task) do not expect the load error.
            return ErrorCode.NONE
        if error:
            return error
        group = self.ownership.group(group_id)
        if group is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.schedule_heartbeat(group, member, self.clock.time_ms())
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        # Stable, or CompletingRebalance: a member may heartbeat between its JoinGroup answer
        # and its SyncGroup (Kafka 2.x accepts this; 0.10.2's REBALANCE_IN_PROGRESS forced a
        # needless second rebalance).
        return ErrorCode.NONE

    def leave_group(self, group_id: str, member_id: str) -> ErrorCode:
        """LeaveGroup v0-v2: one member; its error is the answer's."""
        error, errors = self.leave_members(group_id, [(member_id, None)])
        return error or errors[0]

    def leave_members(self, group_id: str, leaving: list[tuple[str, str | None]]
                      ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Kafka 2.8's handleLeaveGroup: (member id, group.instance.id) pairs leave at once; a
        static member may be named by its instance id alone. The group's error, then one per
        member (empty when the group's error applies to all)."""
        error = self.ownership.check(group_id)
        if error:
            return error, []
        group = self.ownership.group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        errors = []
        for member_id, group_instance_id in leaving:
            member = group.static_member(group_instance_id) or group.members.get(member_id)
            if member_id and group.is_static_member_fenced(member_id, group_instance_id):
                errors.append(ErrorCode.FENCED_INSTANCE_ID)
            elif member_id in group.pending_members:
                timer = group.pending_members.pop(member_id)
                if timer is not None:
                    timer.cancel()
                self._try_complete_join(group)
                errors.append(ErrorCode.NONE)
            elif member is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                logger.info("group %s: member %s leaves", group_id, member.member_id)
                self._on_member_failure(group, member)
                errors.append(ErrorCode.NONE)
        return ErrorCode.NONE, errors

    def schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, now: int) -> None:
        member.last_heartbeat_ms = now
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self.timers.schedule(
            now + member.session_timeout_ms, lambda: self._on_session_deadline(group, member))

    def _on_session_deadline(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.join_callback is not None or member.sync_callback is not None:
            return   # waiting on the group, not on the client
        if member.last_heartbeat_ms + member.session_timeout_ms > self.clock.time_ms():
            return
        logger.info("group %s: member %s missed its session timeout of %d ms",
                    group.group_id, member.member_id, member.session_timeout_ms)
        self._on_member_failure(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        # A request of the member still waiting (its LeaveGroup came on another connection)
        # is answered rather than left hanging.
        self._release(member, ErrorCode.UNKNOWN_MEMBER_ID)

    @staticmethod
    def _release(member: MemberMetadata, error: ErrorCode) -> None:
        """Stop the member's session timer and answer its waiting JoinGroup / SyncGroup with ``error``."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        join_callback, member.join_callback = member.join_callback, None
        sync_callback, member.sync_callback = member.sync_callback, None
        if join_callback is not None:
            join_callback(JoinResult(error, member.member_id))
        if sync_callback is not None:
            sync_callback(SyncResult(error))

    def _on_member_failure(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)


    # ================================================================ DescribeGroups

    def describe_group(self, group_id: str) -> GroupSummary:
        error = self.ownership.check(group_id, validate_id=False)
        if error:
            return GroupSummary(error, group_id)
        group = self.ownership.group(group_id)
        if group is None:
            return GroupSummary(ErrorCode.NONE, group_id)
        if group.is_(GroupState.STABLE):
            members = tuple(MemberSummary(m.member_id, m.client_id, m.client_host,
                                          m.metadata(group.protocol), m.assignment, m.group_instance_id)
                            for m in group.members.values())
            protocol = group.protocol or ""
        else:
            members = tuple(MemberSummary(m.member_id, m.client_id, m.client_host, b"", b"", m.group_instance_id)
                            for m in group.members.values())
            protocol = ""
        return GroupSummary(ErrorCode.NONE, group_id, group.state.value, group.protocol_type or "",
                            protocol, members)

    # ================================================================ loading and unloading

    def on_group_loaded(self, group: GroupMetadata, now: int) -> None:
        """Kafka's onGroupLoaded: the members of a group this broker now coordinates get their sessions."""
        for member in group.members.values():
            self.schedule_heartbeat(group, member, now)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        """Kafka's onGroupUnloaded: waiting requests learn that this broker is not the
        coordinator any more, and no timer of the group fires again."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        for member in group.members.values():
            self._release(member, ErrorCode.NOT_COORDINATOR)
        group.transition_to(GroupState.DEAD)
