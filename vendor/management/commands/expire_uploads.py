from django.core.management.base import BaseCommand

from vendor.services.uploads import upload_expire_stale


class Command(BaseCommand):
    help = "Delete unfinished uploads past their expiry, with their partial bytes (beat does this hourly)."

    def handle(self, *args, **options):
        self.stdout.write(f"{upload_expire_stale()} expired uploads deleted")
