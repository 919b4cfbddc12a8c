"""The login pods: their StatefulSet and Services (the pods' DNS names, ssh)."""
