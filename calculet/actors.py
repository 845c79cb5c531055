"""Who makes a change: a person signed in, the product itself, or a management command run at the shell.

Every service that writes takes `actor: Actor`. The edges build it: pages, the API and the admin pass
`request.user`; tasks and the product's own follow-ups pass `SYSTEM`; a management command passes
`command("its name")`. Services read the person behind it with `actor_user` (for the rows that name who did
it) and the audit log and notifications name it with `actor_label`. Nothing here touches the database.
"""

from dataclasses import dataclass
from typing import TypeAlias

from django.contrib.auth.models import AnonymousUser, User


@dataclass(frozen=True)
class Machine:
    """A change no person makes through the product: its own follow-up work, or a command someone ran at the
    server's shell (who holds the database anyway, so the checks a PM passes it passes too, where a service
    says so)."""

    label: str

    def __str__(self) -> str:
        return self.label


SYSTEM = Machine("system")


def command(name: str) -> Machine:
    """The actor of a management command, named as the audit log shows it."""
    return Machine(f"manage.py {name}")


# A request's user may be anonymous; the services' permission checks refuse it.
Actor: TypeAlias = User | AnonymousUser | Machine


def actor_user(actor: Actor) -> User | None:
    """The signed-in person behind the change, for the columns that name who did it; None for a machine."""
    return actor if isinstance(actor, User) else None


def actor_label(actor: Actor) -> str:
    """The name the audit log and the notifications show."""
    user = actor_user(actor)
    return user.get_username() if user is not None else str(actor)
