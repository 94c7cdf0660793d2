from trl import GRPOTrainer


class AdaGRPOTrainer(GRPOTrainer):
    pass
