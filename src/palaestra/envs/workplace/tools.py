"""The workplace's tools: a calendar, a mailbox, a ticket queue and the staff directory.

Every id the model passes is checked, and a bad one answers with a ToolError that names it and says
which tool lists the valid ids, so the model can recover instead of the rollout failing.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from palaestra.core.errors import ToolError
from palaestra.core.tools import tool
from palaestra.envs.workplace import store
from palaestra.envs.workplace.store import Office

Priority = Literal["low", "medium", "high", "urgent"]
Status = Literal["open", "in_progress", "resolved", "closed"]

_EVENT_HINT = "list_events(date) shows the ids of a day's events"
_TICKET_HINT = "list_tickets(status) shows ticket ids"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _employee_emails(office: Office, emails: list[str], field: str) -> list[str]:
    """Normalise addresses and insist each belongs to an employee (meetings are internal)."""
    known = {r["email"].lower() for r in store.rows(office, "employees")}
    cleaned = [e.strip().lower() for e in emails]
    unknown = [e for e in cleaned if e not in known]
    if unknown:
        raise ToolError(
            f"{field}: no employee with email {', '.join(unknown)}",
            hint="lookup_employee(name) gives an employee's email",
        )
    return list(dict.fromkeys(cleaned))


class WorkplaceTools:
    """Tool methods; mixed into the Workplace environment (state is the session's Office)."""

    # ---- directory -------------------------------------------------------------------------------
    @tool
    def lookup_employee(self, state: Office, name: str) -> list[dict[str, Any]]:
        """Find employees whose name or email contains the text.

        Args:
            name: Part of a name or email, e.g. "Priya" or "shah".
        """
        needle = f"%{name.strip().lower()}%"
        return store.rows(state, "employees", "lower(name) LIKE ? OR lower(email) LIKE ?", (needle, needle))

    @tool
    def list_employees(self, state: Office, department: str = "") -> list[dict[str, Any]]:
        """List employees, optionally only those of one department.

        Args:
            department: Department name, e.g. "Finance"; empty for everyone.
        """
        if not department.strip():
            return store.rows(state, "employees")
        return store.rows(state, "employees", "lower(department) = ?", (department.strip().lower(),))

    # ---- calendar --------------------------------------------------------------------------------
    @tool
    def list_events(self, state: Office, date: str) -> list[dict[str, Any]]:
        """List the scheduled (not cancelled) events on a day, earliest first.

        Args:
            date: The day, as YYYY-MM-DD.
        """
        d = store.day(date)
        found = store.rows(state, "events", "substr(start, 1, 10) = ? AND status = 'scheduled'", (d,))
        return sorted(found, key=lambda e: (e["start"], e["id"]))

    @tool
    def add_event(
        self, state: Office, title: str, start: str, end: str, attendees: list[str] | None = None,
        location: str = "",
    ) -> dict[str, Any]:
        """Create a calendar event organised by the user.

        Args:
            title: Event title.
            start: Start, as YYYY-MM-DDTHH:MM.
            end: End, as YYYY-MM-DDTHH:MM (after start).
            attendees: Employee emails to invite.
            location: Room or link (optional).
        """
        s, e = store.when(start, "start"), store.when(end, "end")
        if e <= s:
            raise ToolError(f"end {e} is not after start {s}", hint="give an end time later than the start")
        if not title.strip():
            raise ToolError("title is empty", hint="give the event a title")
        people = _employee_emails(state, attendees or [], "attendees")
        row = {"title": title.strip(), "start": s, "end": e, "attendees": people, "organizer": state.user,
               "location": location, "status": "scheduled"}
        event_id = store.insert(state.conn, "events", row)
        state.conn.commit()
        return {"id": event_id, **row}

    def _live_event(self, state: Office, event_id: int) -> dict[str, Any]:
        event = store.get(state, "events", event_id, "event", _EVENT_HINT)
        if event["status"] == "cancelled":
            raise ToolError(f"event {event_id} is already cancelled", hint=_EVENT_HINT)
        return event

    @tool
    def cancel_event(self, state: Office, event_id: int) -> dict[str, Any]:
        """Cancel an event.

        Args:
            event_id: The event's id.
        """
        self._live_event(state, event_id)
        store.update(state.conn, "events", event_id, {"status": "cancelled"})
        return store.get(state, "events", event_id, "event", _EVENT_HINT)

    @tool
    def reschedule_event(self, state: Office, event_id: int, start: str, end: str) -> dict[str, Any]:
        """Move an event to a new time.

        Args:
            event_id: The event's id.
            start: New start, as YYYY-MM-DDTHH:MM.
            end: New end, as YYYY-MM-DDTHH:MM.
        """
        self._live_event(state, event_id)
        s, e = store.when(start, "start"), store.when(end, "end")
        if e <= s:
            raise ToolError(f"end {e} is not after start {s}", hint="give an end time later than the start")
        store.update(state.conn, "events", event_id, {"start": s, "end": e})
        return store.get(state, "events", event_id, "event", _EVENT_HINT)

    @tool
    def invite_to_event(self, state: Office, event_id: int, email: str) -> dict[str, Any]:
        """Add an employee to an event's attendees.

        Args:
            event_id: The event's id.
            email: The employee's email.
        """
        event = self._live_event(state, event_id)
        (person,) = _employee_emails(state, [email], "email")
        if person in event["attendees"]:
            raise ToolError(f"{person} already attends event {event_id}", hint="nothing to do")
        store.update(state.conn, "events", event_id, {"attendees": [*event["attendees"], person]})
        return store.get(state, "events", event_id, "event", _EVENT_HINT)

    # ---- email -----------------------------------------------------------------------------------
    @tool
    def search_emails(
        self, state: Office, query: str, folder: Literal["inbox", "sent", "all"] = "all"
    ) -> list[dict[str, Any]]:
        """Find emails whose sender, subject or body contain every word of the query, newest first.

        Args:
            query: Words to look for, e.g. "invoice CloudCo".
            folder: "inbox", "sent" or "all".
        """
        words = [w.lower() for w in query.split()]
        found = []
        for mail in store.rows(state, "emails"):
            if folder != "all" and mail["folder"] != folder:
                continue
            text = " ".join([mail["sender"], *mail["recipients"], mail["subject"], mail["body"]]).lower()
            if all(w in text for w in words):
                preview = mail["body"][:80] + ("..." if len(mail["body"]) > 80 else "")
                found.append({k: mail[k] for k in ("id", "sender", "recipients", "subject", "sent_at", "folder")}
                             | {"preview": preview})
        return sorted(found, key=lambda m: (m["sent_at"], m["id"]), reverse=True)

    @tool
    def read_email(self, state: Office, email_id: int) -> dict[str, Any]:
        """Read one email in full.

        Args:
            email_id: The email's id (from search_emails).
        """
        return store.get(state, "emails", email_id, "email", "search_emails(query) shows email ids")

    @tool
    def send_email(
        self, state: Office, to: list[str], subject: str, body: str, in_reply_to: int | None = None
    ) -> dict[str, Any]:
        """Send an email from the user.

        Args:
            to: Recipient email addresses.
            subject: Subject line.
            body: Message text.
            in_reply_to: Id of the email this answers, if any.
        """
        if not to:
            raise ToolError("no recipients", hint="give at least one address in `to`")
        bad = [a for a in to if not _EMAIL.match(a.strip())]
        if bad:
            raise ToolError(f"not an email address: {', '.join(bad)}", hint="lookup_employee(name) gives emails")
        if in_reply_to is not None:
            store.get(state, "emails", in_reply_to, "email", "search_emails(query) shows email ids")
        row = {"sender": state.user, "recipients": [a.strip().lower() for a in to], "subject": subject,
               "body": body, "sent_at": state.now, "folder": "sent", "in_reply_to": in_reply_to}
        email_id = store.insert(state.conn, "emails", row)
        state.conn.commit()
        return {"id": email_id, "status": "sent"}

    # ---- tickets ---------------------------------------------------------------------------------
    @tool
    def list_tickets(
        self, state: Office, status: Literal["open", "in_progress", "resolved", "closed", "all"] = "open"
    ) -> list[dict[str, Any]]:
        """List helpdesk tickets with a status.

        Args:
            status: "open", "in_progress", "resolved", "closed" or "all".
        """
        if status == "all":
            return store.rows(state, "tickets")
        return store.rows(state, "tickets", "status = ?", (status,))

    @tool
    def create_ticket(
        self, state: Office, title: str, priority: Priority = "medium", description: str = "",
        assignee: str | None = None,
    ) -> dict[str, Any]:
        """Open a helpdesk ticket.

        Args:
            title: Short summary.
            priority: "low", "medium", "high" or "urgent".
            description: Details.
            assignee: Email of the employee who should handle it (optional).
        """
        if not title.strip():
            raise ToolError("title is empty", hint="give the ticket a title")
        owner = _employee_emails(state, [assignee], "assignee")[0] if assignee else None
        row = {"title": title.strip(), "description": description, "priority": priority, "status": "open",
               "assignee": owner, "reporter": state.user, "created_at": state.now}
        ticket_id = store.insert(state.conn, "tickets", row)
        state.conn.commit()
        return {"id": ticket_id, **row}

    @tool
    def update_ticket(
        self, state: Office, ticket_id: int, status: Status | None = None, priority: Priority | None = None,
        assignee: str | None = None,
    ) -> dict[str, Any]:
        """Change a ticket's status, priority and/or assignee.

        Args:
            ticket_id: The ticket's id.
            status: New status: "open", "in_progress", "resolved" or "closed".
            priority: New priority: "low", "medium", "high" or "urgent".
            assignee: Email of the new assignee.
        """
        store.get(state, "tickets", ticket_id, "ticket", _TICKET_HINT)
        changes: dict[str, Any] = {k: v for k, v in (("status", status), ("priority", priority)) if v}
        if assignee:
            changes["assignee"] = _employee_emails(state, [assignee], "assignee")[0]
        if not changes:
            raise ToolError("nothing to change", hint="give status, priority or assignee")
        store.update(state.conn, "tickets", ticket_id, {**changes, "updated_at": state.now})
        return store.get(state, "tickets", ticket_id, "ticket", _TICKET_HINT)
