"""What every page's top bar shows of the signed-in user."""

from calculet import labels
from vendor.access import may_read_audit, user_role


def membership(request) -> dict:
    role = user_role(request.user)
    # Object pages link to their history in the audit log for those who may read it.
    return {
        "web_role": role,
        "web_role_label": labels.label("role", role),
        "web_reads_audit": may_read_audit(request.user),
    }
